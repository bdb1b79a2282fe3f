package docker

import "time"

// The spec hashes (LabelSpecHash, LabelSpecFields) are computed over the
// encoding/json form of these shapes: the field names and layout the hashes
// have always had, whatever JSON form the spec types have for storage. A
// field added to one of the spec types without its shape here fails to
// compile, so the hash of an unchanged spec never changes by accident (a
// changed hash recreates the container).
type (
	hashPort struct {
		HostIP        string
		HostPort      string
		ContainerPort uint16
		Protocol      string
	}
	hashMount struct {
		Type     string
		Source   string
		Target   string
		ReadOnly bool
	}
	hashHealthcheck struct {
		Test        []string
		Interval    time.Duration
		Timeout     time.Duration
		StartPeriod time.Duration
		Retries     int
		// Left out when zero, so the hash of a healthcheck without it
		// is the one it always had.
		StartInterval time.Duration `json:",omitempty"`
	}
	hashDevice struct {
		Host        string
		Container   string
		Permissions string
	}
	hashUlimit struct {
		Name string
		Soft int64
		Hard int64
	}
	hashLogging struct {
		Driver  string
		Options map[string]string
	}
)

// hashShapes converts every element of v with to.
func hashShapes[T, H any](v []T, to func(T) H) []H {
	out := make([]H, len(v))
	for i, x := range v {
		out[i] = to(x)
	}
	return out
}

// hashShape converts *v with to; nil stays nil.
func hashShape[T, H any](v *T, to func(T) H) *H {
	if v == nil {
		return nil
	}
	h := to(*v)
	return &h
}
