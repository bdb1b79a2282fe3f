package statuspage

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func FuzzMaskData(f *testing.F) {
	for _, s := range []string{`{"DB_PASSWORD":"x","env":["A_TOKEN=y","B=z"]}`, `[{"name":"API_KEY","value":1}]`, `"\u0000sealed"`, `not json`, `{} {}`, `"postgres://u:p@h/d"`} {
		f.Add([]byte(s))
	}
	m := masker{extra: []string{"SITE_ID"}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out := m.data(raw)
		if len(raw) == 0 {
			require.Empty(t, out)
			return
		}
		require.True(t, json.Valid(out), "masked data is JSON: %q", out)
	})
}
