package autopilot_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// The CRD k0s installs for plans: testdata/k0s/crd-plans.yaml, a copy of
// static/_crds/autopilot/autopilot.k0sproject.io_plans.yaml of
// github.com/k0sproject/k0s at commit
// dff90cee9a6e8e22c6d0f3efef0f9a77fc223be4 (see testdata/k0s/README.md).
const k0sCRDFile = "testdata/k0s/crd-plans.yaml"

// k0sCloseSchema makes the structural schema s refuse unknown fields, as
// the Kubernetes API server does under strict field validation (the
// default of kubectl): every object schema with properties and no
// additionalProperties gets additionalProperties: false. A schema without
// properties (metadata: {type: object}) stays open. The x-kubernetes-*
// extensions, which jsonschema does not know, are dropped.
func k0sCloseSchema(s map[string]any) {
	for k := range s {
		if strings.HasPrefix(k, "x-kubernetes-") {
			delete(s, k)
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		if _, ok := s["additionalProperties"]; !ok {
			s["additionalProperties"] = false
		}
		for _, p := range props {
			if m, ok := p.(map[string]any); ok {
				k0sCloseSchema(m)
			}
		}
	}
	for _, k := range []string{"items", "additionalProperties"} {
		if m, ok := s[k].(map[string]any); ok {
			k0sCloseSchema(m)
		}
	}
}

// k0sJSON reads a JSON or YAML document as jsonschema validates it.
func k0sJSON(t testing.TB, doc []byte) any {
	t.Helper()
	j, err := yaml.YAMLToJSON(doc)
	require.NoError(t, err)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	require.NoError(t, err)
	return v
}

// k0sCRDSchema compiles the openAPIV3Schema of the plan CRD's first version
// (v1beta2), closed by k0sCloseSchema, asserting formats (date-time).
func k0sCRDSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	b, err := os.ReadFile(k0sCRDFile)
	require.NoError(t, err)
	crd, ok := k0sJSON(t, b).(map[string]any)
	require.True(t, ok, "CRD is not an object")
	versions, ok := crd["spec"].(map[string]any)["versions"].([]any)
	require.True(t, ok, "CRD has no spec.versions")
	require.NotEmpty(t, versions)
	v0 := versions[0].(map[string]any)
	require.Equal(t, "v1beta2", v0["name"])
	s, ok := v0["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
	require.True(t, ok, "CRD has no openAPIV3Schema")
	k0sCloseSchema(s)

	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft4)
	c.AssertFormat()
	const url = "file:///k0s/crd-plans.json"
	require.NoError(t, c.AddResource(url, s))
	sch, err := c.Compile(url)
	require.NoError(t, err)
	return sch
}

// k0sValidate validates the JSON or YAML document doc against sch.
func k0sValidate(t testing.TB, sch *jsonschema.Schema, doc []byte) error {
	t.Helper()
	return sch.Validate(k0sJSON(t, doc))
}

// k0sGen makes random plans and statuses that k0s can express: the
// k0supdate and airgapupdate commands with the fields of k0s's Plan type
// (version, platforms of "<os>-<arch>" -> {url, sha256?}, forceupdate,
// controllers/workers targets under targets: for k0supdate and an inline
// workers: group for airgapupdate, static or selector discovery,
// limits.concurrent), and statuses with k0s's state names.
type k0sGen struct{ r *rand.Rand }

func (g k0sGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

// version returns a version string k0s accepts (any string; k0s compares
// it with the installed version): mostly k0s release versions, and the
// versions of k0s's own integration tests and development builds.
func (g k0sGen) version() string {
	switch g.r.IntN(8) {
	case 0:
		return g.pick("v0.0.0", "v99.99.99")
	case 1:
		return fmt.Sprintf("v1.%d.0-alpha.%d-dev+k0s", 30+g.r.IntN(8), g.r.IntN(4))
	case 2:
		return fmt.Sprintf("v1.%d.%d-rc.%d+k0s.0", 28+g.r.IntN(10), g.r.IntN(10), g.r.IntN(3))
	}
	return fmt.Sprintf("v1.%d.%d+k0s.%d", 28+g.r.IntN(10), g.r.IntN(12), g.r.IntN(2))
}

// k0sRaw is v as a compact JSON value with sorted keys, as Decode keeps
// command spec values.
func k0sRaw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (g k0sGen) platforms(version string) json.RawMessage {
	all := []string{"linux-amd64", "linux-arm64", "linux-arm", "windows-amd64"}
	g.r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	m := map[string]map[string]string{}
	for _, p := range all[:1+g.r.IntN(len(all))] {
		u := map[string]string{"url": fmt.Sprintf("https://github.com/k0sproject/k0s/releases/download/%s/k0s-%s-%s", version, version, p)}
		if g.r.IntN(2) == 0 {
			u["sha256"] = fmt.Sprintf("%016x%016x%016x%016x", g.r.Uint64(), g.r.Uint64(), g.r.Uint64(), g.r.Uint64())
		}
		m[p] = u
	}
	return k0sRaw(m)
}

func (g k0sGen) group(name string) plan.CommandTargets {
	t := plan.CommandTargets{Group: name}
	if g.r.IntN(4) != 0 { // else limits are not written (k0s's default is 1)
		t.Concurrent = 1 + g.r.IntN(10)
	}
	prefix := strings.TrimSuffix(name, "s")
	if g.r.IntN(3) == 0 {
		sel := &plan.CommandSelector{}
		if g.r.IntN(3) != 0 {
			sel.Labels = g.pick("environment=staging", "foo=bar", "node-role.kubernetes.io/control-plane=true,tier in (a,b)")
		}
		if g.r.IntN(2) == 0 {
			sel.Fields = fmt.Sprintf("metadata.name=%s%d", prefix, g.r.IntN(5))
		}
		t.Discovery.Selector = sel
		return t
	}
	n := 1 + g.r.IntN(5)
	for i := range n {
		if g.r.IntN(4) == 0 {
			t.Discovery.Static = append(t.Discovery.Static, fmt.Sprintf("ip-172-31-%d-%d", i, g.r.IntN(256)))
		} else {
			t.Discovery.Static = append(t.Discovery.Static, fmt.Sprintf("%s%d", prefix, i))
		}
	}
	return t
}

func (g k0sGen) command() plan.Command {
	version := g.version()
	spec := map[string]json.RawMessage{"version": k0sRaw(version), "platforms": g.platforms(version)}
	if g.r.IntN(2) == 0 {
		c := plan.Command{Kind: "airgapupdate", Spec: spec, InlineTargets: true}
		c.Targets = []plan.CommandTargets{g.group("workers")}
		return c
	}
	c := plan.Command{Kind: "k0supdate", Spec: spec}
	switch g.r.IntN(3) { // k0s writes only true (omitempty); false is valid too
	case 0:
		spec["forceupdate"] = k0sRaw(true)
	case 1:
		spec["forceupdate"] = k0sRaw(false)
	}
	switch g.r.IntN(3) {
	case 0:
		c.Targets = []plan.CommandTargets{g.group("controllers")}
	case 1:
		c.Targets = []plan.CommandTargets{g.group("workers")}
	default:
		c.Targets = []plan.CommandTargets{g.group("controllers"), g.group("workers")}
	}
	return c
}

// edges changes doc into one of the corner cases k0s accepts (the CRD
// asks only that the keys be there): an empty spec.timestamp, a k0supdate
// with `targets: {}`, a group with `discovery: {}` (k0s discovers no node
// from it; written here as an empty static list, which is how Decode
// reads it), no platform at all (`platforms: {}`).
func (g k0sGen) edges(doc *plan.Document) {
	if g.r.IntN(2) == 0 {
		doc.Spec.Timestamp = ""
	}
	for i := range doc.Spec.Commands {
		c := &doc.Spec.Commands[i]
		switch g.r.IntN(4) {
		case 0:
			if c.Kind == "k0supdate" {
				c.Targets = nil
			}
		case 1:
			for j := range c.Targets {
				c.Targets[j].Discovery = plan.CommandDiscovery{Static: []string{}}
			}
		case 2:
			c.Spec["platforms"] = k0sRaw(map[string]any{})
		}
	}
}

// plan returns a plan document without status.
func (g k0sGen) plan() *plan.Document {
	p := plan.Plan{
		ID:        g.pick("id123", "id1234", "TestApply", fmt.Sprintf("plan-%d", g.r.IntN(1000))),
		Timestamp: g.pick("now", time.Unix(1.6e9+g.r.Int64N(2e8), 0).UTC().Format(time.RFC3339)),
	}
	for range 1 + g.r.IntN(3) {
		p.Commands = append(p.Commands, g.command())
	}
	return &plan.Document{
		APIVersion: "autopilot.k0sproject.io/v1beta2",
		Kind:       "Plan",
		Metadata:   &plan.Metadata{Name: "autopilot"},
		Spec:       p,
	}
}

// The state names k0s writes (pkg/autopilot/controller/plans/core/types.go).
var (
	k0sPlanStates   = []string{"SchedulableWait", "Schedulable", "Completed", "IncompleteTargets", "Restricted", "ApplyFailed"}
	k0sTargetStates = []string{"SignalPending", "SignalSent", "SignalCompleted", "SignalApplyFailed", "SignalMissingNode", "SignalMissingPlatform"}
)

// status returns a status answering the commands of p, as k0s writes it:
// one entry per command with its id, kind, state and, per group, the state
// and the whole-second UTC timestamp of every target (a group with no
// target is not written). With descriptions, some commands have k0s's
// `description`; converge's only command text field is
// CommandStatus.Reason, so that is where it goes.
func (g k0sGen) status(p plan.Plan, descriptions bool) *plan.Status {
	st := &plan.Status{State: plan.State(g.pick(k0sPlanStates...))}
	for i, c := range p.Commands {
		cs := plan.CommandStatus{ID: i, Kind: c.Kind, State: plan.State(g.pick(k0sPlanStates...)), Targets: map[string][]plan.TargetStatus{}}
		if descriptions && g.r.IntN(2) == 0 {
			cs.Reason = g.pick("unable to find node 'worker3'", "node controller1 is excluded from plans", "failed to discover targets")
		}
		for _, tg := range c.Targets {
			nodes := tg.Discovery.Static
			if nodes == nil {
				for j := range g.r.IntN(4) {
					nodes = append(nodes, fmt.Sprintf("node-%d", j))
				}
			}
			for _, n := range nodes {
				cs.Targets[tg.Group] = append(cs.Targets[tg.Group], plan.TargetStatus{
					Name:                 n,
					State:                plan.TargetState(g.pick(k0sTargetStates...)),
					LastUpdatedTimestamp: time.Unix(1.6e9+g.r.Int64N(2e8), 0).UTC(),
				})
			}
		}
		st.Commands = append(st.Commands, cs)
	}
	return st
}

// k0sSeeds are the fixed seeds of the property test.
func k0sSeeds() []uint64 {
	s := make([]uint64, 200)
	for i := range s {
		s[i] = uint64(i + 1)
	}
	return s
}

// k0sPropFailure is the first failing case of a property, with the count
// of every kind of error.
type k0sPropFailure struct {
	seeds   []uint64
	err     error
	doc     []byte
	classes map[string]int
}

// k0sErrIndex matches the indices in the paths of an error message.
var k0sErrIndex = regexp.MustCompile(`/\d+|\[\d+\]`)

// k0sErrClass is the kind of err: its lines, up to the dump of a differing
// document, with the indices of paths replaced by *, and without the
// schema's URL.
func k0sErrClass(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "\nwant:"); i >= 0 {
		msg = msg[:i]
	}
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- "))
		l = k0sErrIndex.ReplaceAllStringFunc(l, func(m string) string {
			if m[0] == '/' {
				return "/*"
			}
			return "[*]"
		})
		if l != "" && !strings.HasPrefix(l, "jsonschema validation failed") && !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "; ")
}

// TestK0sCRDEncodedPlans is a property test against the CRD of k0s: for
// random plans (and statuses) that k0s can express, what autopilot.Encode
// (YAML) and encoding/json write validates against the CRD's
// openAPIV3Schema, refusing unknown fields as the API server does under
// strict field validation, and autopilot.Decode gives back the original
// document. Each property is a subtest reporting how many of the seeds
// fail, the failing seeds, and the first failing document.
func TestK0sCRDEncodedPlans(t *testing.T) {
	sch := k0sCRDSchema(t)
	type variant struct {
		name string
		make func(g k0sGen) *plan.Document
	}
	variants := []variant{
		{"spec", func(g k0sGen) *plan.Document { return g.plan() }},
		{"status", func(g k0sGen) *plan.Document {
			doc := g.plan()
			doc.Status = g.status(doc.Spec, false)
			return doc
		}},
		{"status with description", func(g k0sGen) *plan.Document {
			doc := g.plan()
			doc.Status = g.status(doc.Spec, true)
			return doc
		}},
		{"spec with corner cases", func(g k0sGen) *plan.Document {
			doc := g.plan()
			g.edges(doc)
			return doc
		}},
	}
	var names []string
	failures := map[string]*k0sPropFailure{}
	fail := func(prop string, seed uint64, doc []byte, err error) {
		f := failures[prop]
		if f == nil {
			f = &k0sPropFailure{err: err, doc: doc, classes: map[string]int{}}
			failures[prop] = f
		}
		f.seeds = append(f.seeds, seed)
		f.classes[k0sErrClass(err)]++
	}
	for _, v := range variants {
		props := []string{"yaml validates", "json validates", "yaml round trip", "json round trip"}
		for _, p := range props {
			names = append(names, v.name+": "+p)
		}
		for _, seed := range k0sSeeds() {
			doc := v.make(k0sGen{rand.New(rand.NewPCG(seed, 0x6b30735f637264))})

			y, err := autopilot.Encode(doc)
			require.NoError(t, err, "seed %d", seed)
			j, err := json.Marshal(doc)
			require.NoError(t, err, "seed %d", seed)
			for _, enc := range []struct {
				name string
				b    []byte
			}{{"yaml", y}, {"json", j}} {
				if err := k0sValidate(t, sch, enc.b); err != nil {
					fail(v.name+": "+enc.name+" validates", seed, y, err)
				}
				back, err := autopilot.Decode(enc.b)
				if err == nil && !assert.ObjectsAreEqual(doc, back) {
					err = fmt.Errorf("decoded document differs:\n%s", k0sDiff(doc, back))
				}
				if err != nil {
					fail(v.name+": "+enc.name+" round trip", seed, y, err)
				}
			}
		}
	}
	n := len(k0sSeeds())
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			f := failures[name]
			if f == nil {
				return
			}
			kinds := slices.Collect(maps.Keys(f.classes))
			sort.Slice(kinds, func(i, j int) bool {
				if f.classes[kinds[i]] != f.classes[kinds[j]] {
					return f.classes[kinds[i]] > f.classes[kinds[j]]
				}
				return kinds[i] < kinds[j]
			})
			var classes []string
			for i, c := range kinds {
				if i == 10 {
					classes = append(classes, fmt.Sprintf("  ... and %d more kinds", len(kinds)-i))
					break
				}
				classes = append(classes, fmt.Sprintf("  %d× %s", f.classes[c], c))
			}
			t.Errorf("%d of %d cases fail (seeds %v)\nerrors:\n%s\nfirst, seed %d: %v\ndocument (YAML):\n%s",
				len(f.seeds), n, k0sShortSeeds(f.seeds), strings.Join(classes, "\n"), f.seeds[0], f.err, f.doc)
		})
	}
}

// k0sShortSeeds lists at most 20 seeds.
func k0sShortSeeds(s []uint64) string {
	if len(s) <= 20 {
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("%v ... and %d more", s[:20], len(s)-20)
}

// k0sDiff shows want and got as YAML.
func k0sDiff(want, got *plan.Document) string {
	w, _ := yaml.Marshal(want)
	g, _ := yaml.Marshal(got)
	return fmt.Sprintf("want:\n%s\ngot:\n%s", w, g)
}

// k0sBaseDoc is a plan as k0s writes it (all the fields of the CRD), which
// the negative controls spoil one way each.
const k0sBaseDoc = `
apiVersion: autopilot.k0sproject.io/v1beta2
kind: Plan
metadata:
  name: autopilot
spec:
  id: id123
  timestamp: now
  commands:
  - k0supdate:
      version: v1.34.1+k0s.0
      forceupdate: true
      platforms:
        linux-amd64:
          url: https://example.invalid/k0s
          sha256: "0000000000000000000000000000000000000000000000000000000000000000"
      targets:
        controllers:
          discovery: {static: {nodes: [controller0]}}
          limits: {concurrent: 1}
        workers:
          discovery: {selector: {labels: foo=bar, fields: metadata.name=worker0}}
  - airgapupdate:
      version: v1.34.1+k0s.0
      platforms:
        linux-amd64: {url: https://example.invalid/bundle}
      workers:
        discovery: {static: {nodes: [worker0]}}
status:
  state: IncompleteTargets
  commands:
  - id: 0
    state: IncompleteTargets
    description: unable to find node 'worker0'
    k0supdate:
      controllers:
      - {name: controller0, state: SignalCompleted, lastUpdatedTimestamp: "2022-05-11T19:13:02Z"}
  - id: 1
    state: SchedulableWait
    airgapupdate:
      workers:
      - {name: worker0, state: SignalPending, lastUpdatedTimestamp: "2022-05-11T19:13:02Z"}
`

// TestK0sCRDNegativeControls proves that the schema of
// TestK0sCRDEncodedPlans can fail: a k0s document passes, and each
// spoiled copy is refused for the reason given.
func TestK0sCRDNegativeControls(t *testing.T) {
	sch := k0sCRDSchema(t)
	path := func(m map[string]any, keys ...any) any {
		var v any = m
		for _, k := range keys {
			switch k := k.(type) {
			case string:
				v = v.(map[string]any)[k]
			case int:
				v = v.([]any)[k]
			}
		}
		return v
	}
	obj := func(m map[string]any, keys ...any) map[string]any { return path(m, keys...).(map[string]any) }
	tests := []struct {
		name   string
		spoil  func(m map[string]any)
		refuse string // "" for a document that validates
	}{
		{name: "k0s document", spoil: func(map[string]any) {}},
		{name: "unknown field in a k0supdate body", refuse: "bogus", spoil: func(m map[string]any) {
			obj(m, "spec", "commands", 0, "k0supdate")["bogus"] = true
		}},
		{name: "unknown field in an airgapupdate body", refuse: "targets", spoil: func(m map[string]any) {
			obj(m, "spec", "commands", 1, "airgapupdate")["targets"] = map[string]any{}
		}},
		{name: "command status with reason instead of description", refuse: "reason", spoil: func(m map[string]any) {
			cs := obj(m, "status", "commands", 0)
			cs["reason"] = cs["description"]
			delete(cs, "description")
		}},
		{name: "command status with startedTimestamp", refuse: "startedTimestamp", spoil: func(m map[string]any) {
			obj(m, "status", "commands", 1)["startedTimestamp"] = "2022-05-11T19:13:02Z"
		}},
		{name: "target status with attempt", refuse: "attempt", spoil: func(m map[string]any) {
			obj(m, "status", "commands", 1, "airgapupdate", "workers", 0)["attempt"] = 1
		}},
		{name: "target status without lastUpdatedTimestamp", refuse: "lastUpdatedTimestamp", spoil: func(m map[string]any) {
			delete(obj(m, "status", "commands", 1, "airgapupdate", "workers", 0), "lastUpdatedTimestamp")
		}},
		{name: "target status timestamp not a date-time", refuse: "date-time", spoil: func(m map[string]any) {
			obj(m, "status", "commands", 1, "airgapupdate", "workers", 0)["lastUpdatedTimestamp"] = "yesterday"
		}},
		{name: "spec without timestamp", refuse: "timestamp", spoil: func(m map[string]any) {
			delete(obj(m, "spec"), "timestamp")
		}},
		{name: "k0supdate without targets", refuse: "targets", spoil: func(m map[string]any) {
			delete(obj(m, "spec", "commands", 0, "k0supdate"), "targets")
		}},
		{name: "platform without url", refuse: "url", spoil: func(m map[string]any) {
			delete(obj(m, "spec", "commands", 1, "airgapupdate", "platforms", "linux-amd64"), "url")
		}},
		{name: "discovery function", refuse: "function", spoil: func(m map[string]any) {
			obj(m, "spec", "commands", 1, "airgapupdate", "workers", "discovery")["function"] = "f"
		}},
		{name: "group order", refuse: "order", spoil: func(m map[string]any) {
			obj(m, "spec", "commands", 0, "k0supdate", "targets", "workers")["order"] = 1
		}},
		{name: "concurrency not an integer", refuse: "integer", spoil: func(m map[string]any) {
			obj(m, "spec", "commands", 0, "k0supdate", "targets", "controllers", "limits")["concurrent"] = "two"
		}},
		{name: "unknown field in metadata is fine", spoil: func(m map[string]any) {
			obj(m, "metadata")["uid"] = "d0c5"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			j, err := yaml.YAMLToJSON([]byte(k0sBaseDoc))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(j, &m))
			tc.spoil(m)
			b, err := json.Marshal(m)
			require.NoError(t, err)
			err = k0sValidate(t, sch, b)
			if tc.refuse == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "%s", b)
			assert.Contains(t, err.Error(), tc.refuse)
		})
	}
}

// TestK0sCRDFixtures checks that the k0s plans of testdata/k0s are valid
// against the CRD as written (so they were copied right), and that what
// Encode writes for them after Decode is valid too and decodes to the same
// document.
func TestK0sCRDFixtures(t *testing.T) {
	sch := k0sCRDSchema(t)
	files := k0sFixtureFiles(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, k0sValidate(t, sch, b), "k0s's own document")

			doc, err := autopilot.Decode(b)
			require.NoError(t, err, "Decode")
			y, err := autopilot.Encode(doc)
			require.NoError(t, err)
			require.NoError(t, k0sValidate(t, sch, y), "Encode(Decode(document)):\n%s", y)
			back, err := autopilot.Decode(y)
			require.NoError(t, err, "Decode(Encode(Decode(document))):\n%s", y)
			assert.Equal(t, doc, back, "round trip")
		})
	}
}
