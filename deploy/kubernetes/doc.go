// Package kubernetes holds the Kubernetes manifests of a Runnel cluster (the YAML files beside this file,
// and the mutual TLS variant in tls/) and the test that keeps them honest. It has no code of its own.
//
// The test decodes every manifest strictly into the k8s.io/api types, so a misspelt or misplaced field
// fails it instead of being dropped by the API server, and checks that the manifests agree with the
// command line they start: every argument parses with the flag set of its role (internal/cli), every
// container port and probe port is the port of an address flag, the Service's target ports name
// container ports, the probes ask for the JobManager's health endpoints, and the JobManager runs two
// replicas with HA on etcd. It then runs the containers' arguments as processes of the runnel binary
// on loopback addresses, with a real etcd, and carries out the probes as the kubelet does.
package kubernetes
