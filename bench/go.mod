module github.com/convergekit/converge/bench

go 1.25.0

require github.com/convergekit/converge v0.0.0

require (
	github.com/emirpasic/gods v1.18.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/heimdalr/dag v1.5.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	k8s.io/client-go v0.34.2 // indirect
)

replace github.com/convergekit/converge => ../
