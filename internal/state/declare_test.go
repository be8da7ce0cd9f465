package state

import (
	"errors"
	"strings"
	"testing"
)

// TestDeclarationPhase pins when a state may be declared: in the operator's Open, once per name. After
// SealDeclarations every constructor fails with ErrDeclaredAfterOpen, naming the state and the operator
// (a function that declares state in ProcessElement hears that at its first record, not "declared twice"
// at its second); a name declared twice in Open is refused with the operator named.
func TestDeclarationPhase(t *testing.T) {
	declare := map[string]func(b Backend, name string) error{
		"value": func(b Backend, name string) error { _, err := NewValue[int64](b, name, nil); return err },
		"list":  func(b Backend, name string) error { _, err := NewList[string](b, name, nil); return err },
		"map":   func(b Backend, name string) error { _, err := NewMap[string, int64](b, name, nil, nil); return err },
	}
	for _, bk := range backendKinds {
		for kind, decl := range declare {
			t.Run(bk.name+"/"+kind, func(t *testing.T) {
				o := fullRange(8)
				o.Owner = "count"
				b := open(t, bk.make, o)
				if err := decl(b, "in-open"); err != nil {
					t.Fatalf("declare in Open: %v", err)
				}
				err := decl(b, "in-open")
				if err == nil || errors.Is(err, ErrDeclaredAfterOpen) ||
					!strings.Contains(err.Error(), `"in-open" is declared twice in operator "count"`) {
					t.Fatalf("declared twice in Open: %v", err)
				}
				b.SealDeclarations()
				for _, name := range []string{"late", "in-open"} {
					err := decl(b, name)
					if !errors.Is(err, ErrDeclaredAfterOpen) {
						t.Fatalf("declare %q after Open: %v, want ErrDeclaredAfterOpen", name, err)
					}
					for _, want := range []string{kind + ` state "` + name + `"`, `operator "count"`, "declared in Open"} {
						if !strings.Contains(err.Error(), want) {
							t.Fatalf("error %q does not contain %q", err, want)
						}
					}
				}
			})
		}
	}
}
