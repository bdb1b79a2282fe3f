package statuspage

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/convergekit/converge"
)

// The masks that stand for values the page never shows.
const (
	// MaskSecret replaces a value whose name is secret
	// (converge.IsSecretEnv, or listed in Options.SecretKeys) and the
	// password of a URL: converge.Redacted.
	MaskSecret = converge.Redacted
	// MaskSealed replaces a sealed value (a string that starts with a
	// zero byte, as every sealed value and a store's marker of one do).
	MaskSealed = "[sealed]"
)

// masker hides the secrets of stored data before the page shows it.
type masker struct {
	extra []string // names secret besides converge.IsSecretEnv's
}

// secret reports whether values named name are secret.
func (m masker) secret(name string) bool { return converge.IsSecretEnv(name, m.extra) }

// data returns raw with every secret masked: the value of a member whose
// name is secret, whatever it holds; the value of an entry "NAME=value"
// of a list, and of an object {"name": NAME, "value": ...}, whose NAME is
// secret (a Compose or Kubernetes environment); a sealed value; and the
// password of every URL in a string. Data that is not JSON is not shown:
// it becomes the JSON string MaskSecret.
func (m masker) data(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		b, _ := json.Marshal(MaskSecret)
		return b
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m.value(v)); err != nil {
		b, _ := json.Marshal(MaskSecret)
		return b
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}

// value masks the secrets in a decoded JSON value.
func (m masker) value(v any) any {
	switch v := v.(type) {
	case string:
		return m.text(v)
	case []any:
		for i, e := range v {
			if s, ok := e.(string); ok {
				if name, _, found := strings.Cut(s, "="); found && m.secret(name) {
					v[i] = name + "=" + MaskSecret
					continue
				}
			}
			v[i] = m.value(e)
		}
		return v
	case map[string]any:
		name, named := v["name"].(string)
		for k, e := range v {
			switch {
			case e == nil:
			case m.secret(k), k == "value" && named && m.secret(name):
				v[k] = MaskSecret
			default:
				v[k] = m.value(e)
			}
		}
		return v
	}
	return v
}

// text masks a string: sealed, or with passwords in URLs.
func (m masker) text(s string) string {
	if strings.HasPrefix(s, "\x00") {
		return MaskSealed
	}
	return converge.RedactURLs(s)
}
