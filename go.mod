module github.com/convergekit/converge

go 1.25.0

require github.com/hashicorp/go-multierror v1.1.1

require (
	github.com/aymanbagabas/go-udiff v0.4.1 // indirect
	github.com/compose-spec/compose-go/v2 v2.16.2 // indirect
	github.com/docker/docker v28.5.2+incompatible // indirect
	github.com/hashicorp/errwrap v1.0.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.18.0 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
