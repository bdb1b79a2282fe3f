package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// Secrets in output. Unless --show-secrets is given, every value
// convergectl prints passes through redactJSON or redactText: the values
// of names converge.IsSecretEnv calls secret (DB_PASSWORD, API_TOKEN, ...)
// and the passwords of URLs (converge.RedactURLs) are replaced by
// converge.Redacted.

// isSecretName reports whether values named name are secret.
func isSecretName(name string) bool { return converge.IsSecretEnv(name, nil) }

// assignment matches NAME=VALUE in text (an environment entry, a query
// parameter, a command line); the value runs to a space, a quote or one
// of ",;&", or is quoted.
var assignment = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_.-]*)=("[^"]*"|'[^']*'|[^\s"',;&]+)`)

// jsonMember matches "NAME": "VALUE" in text (JSON quoted in a message).
var jsonMember = regexp.MustCompile(`"([^"\\]+)"\s*:\s*"((?:[^"\\]|\\.)*)"`)

// redactText returns s with the secret values it holds replaced: the
// passwords of URLs, NAME=VALUE and "NAME": "VALUE" where NAME is secret.
func redactText(s string) string {
	s = converge.RedactURLs(s)
	s = assignment.ReplaceAllStringFunc(s, func(m string) string {
		name, _, _ := strings.Cut(m, "=")
		if !isSecretName(name) {
			return m
		}
		return name + "=" + converge.Redacted
	})
	return jsonMember.ReplaceAllStringFunc(s, func(m string) string {
		sub := jsonMember.FindStringSubmatch(m)
		if !isSecretName(sub[1]) || sub[2] == "" {
			return m
		}
		return `"` + sub[1] + `": "` + converge.Redacted + `"`
	})
}

// jsonNode is a JSON value read in order: an object keeps the order of
// its members.
type jsonNode struct {
	// scalar is a string, json.Number, bool or nil, unless the node is an
	// object or an array.
	scalar  any
	object  bool
	array   bool
	names   []string
	members []*jsonNode
}

// Why a document is not JSON.
var (
	errJSONTrailing  = errors.New("data after the JSON value")
	errJSONTruncated = errors.New("it ends before its value does")
)

func parseJSON(doc []byte) (*jsonNode, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	n, err := readNode(dec)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, errJSONTruncated
	}
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errJSONTrailing
	}
	return n, nil
}

func readNode(dec *json.Decoder) (*jsonNode, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return &jsonNode{scalar: tok}, nil
	}
	n := &jsonNode{object: d == '{', array: d == '['}
	for dec.More() {
		if n.object {
			name, err := dec.Token()
			if err != nil {
				return nil, err
			}
			n.names = append(n.names, name.(string))
		}
		m, err := readNode(dec)
		if err != nil {
			return nil, err
		}
		n.members = append(n.members, m)
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return nil, err
	}
	return n, nil
}

func (n *jsonNode) write(b *bytes.Buffer) {
	switch {
	case n.object:
		b.WriteByte('{')
		for i, m := range n.members {
			if i > 0 {
				b.WriteByte(',')
			}
			name, _ := json.Marshal(n.names[i])
			b.Write(name)
			b.WriteByte(':')
			m.write(b)
		}
		b.WriteByte('}')
	case n.array:
		b.WriteByte('[')
		for i, m := range n.members {
			if i > 0 {
				b.WriteByte(',')
			}
			m.write(b)
		}
		b.WriteByte(']')
	default:
		v, _ := json.Marshal(n.scalar)
		b.Write(v)
	}
}

// redact replaces the secret values under n. secret says n is the value
// of a secret name: every string and number in it is replaced.
func (n *jsonNode) redact(secret bool) {
	switch {
	case n.object:
		// {"name": "DB_PASSWORD", "value": "..."}, as Kubernetes and
		// others write an environment entry.
		named := false
		for i, m := range n.members {
			if s, ok := m.scalar.(string); ok && n.names[i] == "name" && isSecretName(s) {
				named = true
			}
		}
		for i, m := range n.members {
			m.redact(secret || isSecretName(n.names[i]) || (named && n.names[i] == "value"))
		}
	case n.array:
		for _, m := range n.members {
			m.redact(secret)
		}
	default:
		switch v := n.scalar.(type) {
		case string:
			if secret && v != "" {
				n.scalar = converge.Redacted
			} else if !secret {
				n.scalar = redactText(v)
			}
		case json.Number:
			if secret {
				n.scalar = converge.Redacted
			}
		}
	}
}

// redactJSON returns doc with its secret values replaced (see
// jsonNode.redact), the order of its members kept. A document that is not
// JSON is replaced whole: it cannot be told what is secret in it.
func redactJSON(doc json.RawMessage) json.RawMessage {
	if len(doc) == 0 {
		return doc
	}
	n, err := parseJSON(doc)
	if err != nil {
		b, _ := json.Marshal(fmt.Sprintf("%s (not JSON: %v)", converge.Redacted, err))
		return b
	}
	n.redact(false)
	var b bytes.Buffer
	n.write(&b)
	return b.Bytes()
}

// redactHistory replaces the secret values in the reasons of hist.
func redactHistory(hist []converge.HistoryEntry) {
	for i := range hist {
		hist[i].Reason = redactText(hist[i].Reason)
	}
}

// redact replaces the secret values of v.
func (v *objectView) redact() {
	if v == nil {
		return
	}
	v.Reason = redactText(v.Reason)
	if v.LastError != nil {
		le := *v.LastError
		le.Error = redactText(le.Error)
		v.LastError = &le
	}
	if len(v.RecentFailures) > 0 {
		fs := make([]controller.Failure, len(v.RecentFailures))
		for i, f := range v.RecentFailures {
			f.Error = redactText(f.Error)
			fs[i] = f
		}
		v.RecentFailures = fs
	}
	for i := range v.Intents {
		v.Intents[i] = redactText(v.Intents[i])
	}
	v.Data = redactJSON(v.Data)
	redactHistory(v.History)
}

// redact replaces the secret values of v.
func (v *planView) redact() {
	if v == nil {
		return
	}
	v.Reason, v.Abort = redactText(v.Reason), redactText(v.Abort)
	for i := range v.Commands {
		cv := &v.Commands[i]
		cv.Reason = redactText(cv.Reason)
		for j := range cv.Targets {
			cv.Targets[j].Reason = redactText(cv.Targets[j].Reason)
		}
	}
	redactHistory(v.History)
}

// redact replaces the secret values of v.
func (v *targetView) redact() {
	v.Target = redactJSON(v.Target)
}
