package autopilot

import (
	"bytes"
	"encoding/json"
	"sort"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/blockyaml"
)

// decodeFast decodes a YAML plan document of the subset blockyaml reads
// straight into a document, without the YAML -> interface{} -> JSON ->
// strict JSON round trip. ok is false for anything it is not sure of: any
// document the slow path would refuse, and any it would read differently
// (metadata keys that encoding/json would match case-insensitively, strings
// that are escaped in JSON where the slow path parses them raw, ...). The
// caller then takes the slow path, which decides, and names the culprit of
// any error. It does not validate the document. FuzzDecodeFastAgreesWithSlow
// checks that whatever it accepts, the slow path decodes to the same
// document.
func decodeFast(data []byte) (*converge.PlanDocument, bool) {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return nil, false // JSON, or YAML in flow style
	}
	d, ok := blockyaml.Parse(data)
	if !ok {
		return nil, false
	}
	defer d.Release() // the document holds copies of what it needs
	f := fastDecoder{d: d}
	doc, ok := f.document(d.Root())
	if !ok {
		return nil, false
	}
	return doc, true
}

type fastDecoder struct {
	d *blockyaml.Doc
}

// each calls field for each pair of mapping n; ok is false when n is not a
// mapping or field returns false.
func (f *fastDecoder) each(n blockyaml.Node, field func(key []byte, v blockyaml.Node) bool) bool {
	d := f.d
	if d.Kind(n) != blockyaml.Mapping {
		return false
	}
	for i := range d.Len(n) {
		if !field(d.Key(n, i), d.Value(n, i)) {
			return false
		}
	}
	return true
}

// list calls entry for each entry of sequence n.
func (f *fastDecoder) list(n blockyaml.Node, entry func(i int, v blockyaml.Node) bool) bool {
	d := f.d
	if d.Kind(n) != blockyaml.Sequence {
		return false
	}
	for i := range d.Len(n) {
		if !entry(i, d.Entry(n, i)) {
			return false
		}
	}
	return true
}

func (f *fastDecoder) str(n blockyaml.Node, dst *string) bool {
	if f.d.Kind(n) != blockyaml.String {
		return false
	}
	*dst = string(f.d.Text(n))
	return true
}

func (f *fastDecoder) int(n blockyaml.Node, dst *int) bool {
	if f.d.Kind(n) != blockyaml.Int {
		return false
	}
	*dst = int(f.d.Int(n))
	return true
}

// time parses an RFC 3339 timestamp as encoding/json does from the JSON
// string the slow path makes of it, in UTC. Strings that JSON would escape
// are left to the slow path: time.Time reads the JSON text unescaped.
func (f *fastDecoder) time(n blockyaml.Node, dst *time.Time) bool {
	if f.d.Kind(n) != blockyaml.String {
		return false
	}
	b := f.d.Text(n)
	for _, c := range b {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	var t time.Time
	if t.UnmarshalText(b) != nil {
		return false
	}
	*dst = t.UTC()
	return true
}

// targetState returns the state of a target, without allocating for the
// states the runner writes.
func targetState(b []byte) converge.PlanTargetState {
	switch converge.PlanTargetState(b) {
	case converge.HostPending:
		return converge.HostPending
	case converge.HostSent:
		return converge.HostSent
	case converge.HostCompleted:
		return converge.HostCompleted
	}
	return converge.PlanTargetState(b)
}

func (f *fastDecoder) document(n blockyaml.Node) (*converge.PlanDocument, bool) {
	var doc converge.PlanDocument
	ok := f.each(n, func(k []byte, v blockyaml.Node) bool {
		switch string(k) {
		case "apiVersion":
			return f.str(v, &doc.APIVersion)
		case "kind":
			return f.str(v, &doc.Kind)
		case "metadata":
			doc.Metadata = new(converge.PlanMetadata)
			return f.metadata(v, doc.Metadata)
		case "spec":
			return f.spec(v, &doc.Spec)
		case "status":
			doc.Status = new(converge.PlanStatus)
			return f.status(v, doc.Status)
		}
		return false
	})
	return &doc, ok
}

// metadata decodes as encoding/json into PlanMetadata: other keys are
// dropped, unless encoding/json would match them to a field regardless of
// case (only ASCII keys that match no field case-insensitively are dropped
// here).
func (f *fastDecoder) metadata(n blockyaml.Node, m *converge.PlanMetadata) bool {
	return f.each(n, func(k []byte, v blockyaml.Node) bool {
		switch string(k) {
		case "name":
			return f.str(v, &m.Name)
		case "namespace":
			return f.str(v, &m.Namespace)
		case "labels":
			m.Labels = map[string]string{}
			return f.strings(v, m.Labels)
		case "annotations":
			m.Annotations = map[string]string{}
			return f.strings(v, m.Annotations)
		}
		for _, c := range k {
			if c >= 0x80 {
				return false
			}
		}
		for _, name := range []string{"name", "namespace", "labels", "annotations"} {
			if len(k) == len(name) && asciiEqualFold(k, name) {
				return false
			}
		}
		return true
	})
}

func asciiEqualFold(b []byte, s string) bool {
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

func (f *fastDecoder) strings(n blockyaml.Node, m map[string]string) bool {
	return f.each(n, func(k []byte, v blockyaml.Node) bool {
		var s string
		if !f.str(v, &s) {
			return false
		}
		m[string(k)] = s
		return true
	})
}

func (f *fastDecoder) spec(n blockyaml.Node, p *converge.Plan) bool {
	return f.each(n, func(k []byte, v blockyaml.Node) bool {
		switch string(k) {
		case "id":
			return f.str(v, &p.ID)
		case "timestamp":
			return f.str(v, &p.Timestamp)
		case "commands":
			if f.d.Kind(v) != blockyaml.Sequence {
				return false
			}
			p.Commands = make([]converge.Command, f.d.Len(v))
			return f.list(v, func(i int, c blockyaml.Node) bool { return f.command(c, &p.Commands[i]) })
		}
		return false
	})
}

// command decodes `{<kind>: {<spec>, targets, timeout, targetTimeout}}`.
func (f *fastDecoder) command(n blockyaml.Node, c *converge.Command) bool {
	d := f.d
	if d.Kind(n) != blockyaml.Mapping || d.Len(n) != 1 || len(d.Key(n, 0)) == 0 {
		return false
	}
	c.Kind = string(d.Key(n, 0))
	var targets, inline []converge.CommandTargets
	ok := f.each(d.Value(n, 0), func(k []byte, v blockyaml.Node) bool {
		switch string(k) {
		case "timeout":
			return f.duration(v, &c.Timeout)
		case "targetTimeout":
			return f.duration(v, &c.TargetTimeout)
		case "targets":
			return f.each(v, func(g []byte, gv blockyaml.Node) bool {
				t, ok := f.targets(gv, string(g))
				targets = append(targets, t)
				return ok
			})
		case "controllers", "workers":
			t, ok := f.targets(v, string(k))
			inline = append(inline, t)
			return ok
		}
		raw, err := json.Marshal(d.Any(v))
		if err != nil {
			return false
		}
		if c.Spec == nil {
			c.Spec = map[string]json.RawMessage{}
		}
		c.Spec[string(k)] = raw
		return true
	})
	if !ok || (len(inline) > 0 && len(targets) > 0) {
		return false
	}
	if len(inline) > 0 {
		c.InlineTargets = true
		targets = inline
	}
	// The slow path visits the groups by name, then sorts them stably by
	// order; group names are unique, so this is the same order.
	sort.Slice(targets, func(i, j int) bool {
		if targets[i].Order != targets[j].Order {
			return targets[i].Order < targets[j].Order
		}
		return targets[i].Group < targets[j].Group
	})
	c.Targets = targets
	return true
}

func (f *fastDecoder) duration(n blockyaml.Node, dst *time.Duration) bool {
	var s string
	if !f.str(n, &s) {
		return false
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return false
	}
	*dst = v
	return true
}

func (f *fastDecoder) targets(n blockyaml.Node, group string) (converge.CommandTargets, bool) {
	t := converge.CommandTargets{Group: group}
	found := false
	ok := f.each(n, func(k []byte, v blockyaml.Node) bool {
		switch string(k) {
		case "order":
			return f.int(v, &t.Order)
		case "limits":
			return f.each(v, func(k []byte, v blockyaml.Node) bool {
				return string(k) == "concurrent" && f.int(v, &t.Concurrent) && t.Concurrent >= 0
			})
		case "discovery":
			found = true
			return f.discovery(v, &t.Discovery)
		}
		return false
	})
	if !ok || !found {
		return t, false
	}
	disc := t.Discovery
	n1 := 0
	for _, set := range []bool{disc.Static != nil, disc.Selector != nil, disc.Function != ""} {
		if set {
			n1++
		}
	}
	return t, n1 == 1
}

func (f *fastDecoder) discovery(n blockyaml.Node, disc *converge.CommandDiscovery) bool {
	d := f.d
	return f.each(n, func(k []byte, v blockyaml.Node) bool {
		switch string(k) {
		case "static":
			disc.Static = []string{}
			return f.each(v, func(k []byte, v blockyaml.Node) bool {
				if string(k) != "nodes" || d.Kind(v) != blockyaml.Sequence {
					return false
				}
				nodes := make([]string, d.Len(v))
				if !f.list(v, func(i int, e blockyaml.Node) bool { return f.str(e, &nodes[i]) && nodes[i] != "" }) {
					return false
				}
				disc.Static = nodes
				return true
			})
		case "function":
			return f.str(v, &disc.Function) && disc.Function != ""
		case "selector":
			disc.Selector = &converge.CommandSelector{}
			return f.each(v, func(k []byte, v blockyaml.Node) bool {
				switch string(k) {
				case "labels":
					return f.str(v, &disc.Selector.Labels)
				case "fields":
					return f.str(v, &disc.Selector.Fields)
				}
				return false
			})
		}
		return false
	})
}

func (f *fastDecoder) status(n blockyaml.Node, s *converge.PlanStatus) bool {
	return f.each(n, func(k []byte, v blockyaml.Node) bool {
		switch string(k) {
		case "state":
			return f.str(v, (*string)(&s.State))
		case "reason":
			return f.str(v, &s.Reason)
		case "abort":
			return f.str(v, &s.Abort)
		case "commands":
			if f.d.Kind(v) != blockyaml.Sequence {
				return false
			}
			s.Commands = make([]converge.CommandStatus, f.d.Len(v))
			return f.list(v, func(i int, c blockyaml.Node) bool { return f.commandStatus(c, &s.Commands[i]) })
		}
		return false
	})
}

func (f *fastDecoder) commandStatus(n blockyaml.Node, cs *converge.CommandStatus) bool {
	ok := f.each(n, func(k []byte, v blockyaml.Node) bool {
		switch string(k) {
		case "id":
			return f.int(v, &cs.ID)
		case "state":
			return f.str(v, (*string)(&cs.State))
		case "reason":
			return f.str(v, &cs.Reason)
		case "startedTimestamp":
			return f.time(v, &cs.Started)
		}
		if cs.Kind != "" || len(k) == 0 {
			return false
		}
		cs.Kind = string(k)
		cs.Targets = map[string][]converge.PlanTargetStatus{}
		return f.each(v, func(g []byte, gv blockyaml.Node) bool {
			ts, ok := f.targetList(gv)
			cs.Targets[string(g)] = ts
			return ok
		})
	})
	cs.Started = cs.Started.UTC()
	return ok
}

func (f *fastDecoder) targetList(n blockyaml.Node) ([]converge.PlanTargetStatus, bool) {
	if f.d.Kind(n) != blockyaml.Sequence {
		return nil, false
	}
	ts := make([]converge.PlanTargetStatus, f.d.Len(n))
	ok := f.list(n, func(i int, e blockyaml.Node) bool {
		t := &ts[i]
		return f.each(e, func(k []byte, v blockyaml.Node) bool {
			switch string(k) {
			case "name":
				return f.str(v, &t.Name) && t.Name != ""
			case "state":
				if f.d.Kind(v) != blockyaml.String {
					return false
				}
				t.State = targetState(f.d.Text(v))
				return true
			case "reason":
				return f.str(v, &t.Reason)
			case "attempt":
				return f.int(v, &t.Attempt) && t.Attempt >= 0
			case "lastUpdatedTimestamp":
				return f.time(v, &t.LastUpdatedTimestamp)
			}
			return false
		}) && t.Name != ""
	})
	return ts, ok
}
