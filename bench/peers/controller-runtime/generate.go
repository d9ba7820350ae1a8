package main

// DeepCopy for the typed API, as kubebuilder projects generate it (controller-gen from
// sigs.k8s.io/controller-tools, fetched through the Go module proxy):
//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.20.1 object paths=./api/...
