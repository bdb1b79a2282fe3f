module github.com/convergekit/converge/statuspage

go 1.25.0

require (
	github.com/convergekit/converge v0.0.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/hashicorp/errwrap v1.0.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace github.com/convergekit/converge => ../
