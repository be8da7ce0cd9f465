// The dashboard's script.
