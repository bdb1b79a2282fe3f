package converge_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/convergekit/converge"
)

// A central server reads edge reports from devices it does not control:
// the cap is checked before anything is decoded, and a program raises it
// for the reports it expects.
func ExampleDecodeEdgeReport() {
	report := []byte(`{"revision": 7, "items": [{"id": "app", "state": "present", "message": "` + strings.Repeat("x", 200) + `"}]}`)

	_, err := converge.DecodeEdgeReport(report, converge.DecodeLimits{MaxBytes: 128})
	var le *converge.LimitError
	if errors.As(err, &le) {
		fmt.Println(errors.Is(err, converge.ErrTooLarge), le.Limit, le.Max)
	}

	edge, err := converge.DecodeEdgeReport(report, converge.DecodeLimits{MaxBytes: 1 << 10})
	if err != nil {
		panic(err)
	}
	fmt.Println(edge.Revision, edge.Items[0].ID, edge.Items[0].State)
	// Output:
	// true MaxBytes 128
	// 7 app present
}
