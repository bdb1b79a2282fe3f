module github.com/convergekit/converge

go 1.25.0

require github.com/hashicorp/go-multierror v1.1.1

require github.com/hashicorp/errwrap v1.0.0 // indirect
