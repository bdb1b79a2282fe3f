package autopilot_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// k0sFixtureFiles returns the plans of testdata/k0s: every Plan document of
// the docs/ and inttest/ trees of github.com/k0sproject/k0s at commit
// dff90cee9a6e8e22c6d0f3efef0f9a77fc223be4, one a file (the CRD aside).
// testdata/k0s/README.md and the header of each file name its source and
// what was substituted.
func k0sFixtureFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/k0s/*.yaml")
	require.NoError(t, err)
	var plans []string
	for _, f := range files {
		if f != k0sCRDFile {
			plans = append(plans, f)
		}
	}
	require.NotEmpty(t, plans)
	return plans
}

// k0sGroupFacts is what a k0s target group decodes to.
type k0sGroupFacts struct {
	name     string
	static   []string
	selector *plan.CommandSelector
	// limit is the effective concurrency (CommandTargets.Limit).
	limit int
	// none: k0s's Go client wrote the group with an empty discovery
	// (`discovery: {}`), from which k0s discovers no node; the decoder may
	// drop it or keep it, but with no node.
	none bool
}

// k0sCommandFacts is what a k0s command decodes to.
type k0sCommandFacts struct {
	kind string
	// version is spec.commands[i].<kind>.version, kept as written.
	version   string
	platforms []string
	force     bool
	sha256    bool
	inline    bool
	groups    []k0sGroupFacts
}

// TestDecodeK0sPlans decodes every k0s plan of testdata/k0s (copied from
// the docs/ and inttest/ trees of github.com/k0sproject/k0s, commit
// dff90cee9a6e8e22c6d0f3efef0f9a77fc223be4) and checks what it decodes to:
// the id, the commands' kinds in order with their versions as written and
// their platforms, and the target groups with their static nodes or
// selectors.
func TestDecodeK0sPlans(t *testing.T) {
	static := func(name string, nodes ...string) k0sGroupFacts {
		return k0sGroupFacts{name: name, static: nodes, limit: 1}
	}
	selector := func(name, labels, fields string) k0sGroupFacts {
		return k0sGroupFacts{name: name, selector: &plan.CommandSelector{Labels: labels, Fields: fields}, limit: 1}
	}
	const docsVersion = "v1.34.1+k0s.0" // substituted for {{{ k0s_version }}}
	controllers3 := static("controllers", "controller0", "controller1", "controller2")
	noWorkers := k0sGroupFacts{name: "workers", none: true}
	tests := []struct {
		file     string
		id       string
		commands []k0sCommandFacts
		status   *plan.Status
	}{
		{file: "docs-autopilot.yaml", id: "id1234", commands: []k0sCommandFacts{{
			kind: "k0supdate", version: docsVersion, platforms: []string{"linux-amd64"}, sha256: true,
			groups: []k0sGroupFacts{
				static("controllers", "ip-172-31-44-131", "ip-172-31-42-134", "ip-172-31-39-65"),
				{name: "workers", selector: &plan.CommandSelector{Labels: "environment=staging", Fields: "metadata.name=worker2"}, limit: 5},
			},
		}}},
		{file: "docs-autopilot-multicommand.yaml", id: "id123", commands: []k0sCommandFacts{
			{kind: "airgapupdate", version: docsVersion, platforms: []string{"linux-amd64"}, inline: true, groups: []k0sGroupFacts{static("workers", "worker0")}},
			{kind: "k0supdate", version: docsVersion, platforms: []string{"linux-amd64"}, groups: []k0sGroupFacts{static("controllers", "controller0"), static("workers", "worker0")}},
		}, status: func() *plan.Status {
			at := time.Date(2022, 5, 11, 19, 13, 2, 0, time.UTC)
			return &plan.Status{State: plan.StateSchedulableWait, Commands: []plan.CommandStatus{
				{ID: 0, Kind: "airgapupdate", State: plan.StateSchedulableWait, Targets: map[string][]plan.TargetStatus{
					"workers": {{Name: "worker0", State: plan.TargetSent, LastUpdatedTimestamp: at}},
				}},
				{ID: 1, Kind: "k0supdate", State: plan.StateSchedulableWait, Targets: map[string][]plan.TargetStatus{
					"controllers": {{Name: "controller0", State: plan.TargetPending, LastUpdatedTimestamp: at}},
					"workers":     {{Name: "worker0", State: plan.TargetPending, LastUpdatedTimestamp: at}},
				}},
			}}
		}()},
		{file: "inttest-ap-airgap.yaml", id: "id123", commands: []k0sCommandFacts{
			{kind: "airgapupdate", version: "v0.0.0", platforms: []string{"linux-amd64", "linux-arm64"}, inline: true, groups: []k0sGroupFacts{static("workers", "worker0")}},
			{kind: "k0supdate", version: "v0.0.0", platforms: []string{"linux-amd64", "linux-arm64"}, force: true, groups: []k0sGroupFacts{static("controllers", "controller0"), static("workers", "worker0")}},
		}},
		{file: "inttest-ap-airgap-controllerworker.yaml", id: "id123", commands: []k0sCommandFacts{
			{kind: "airgapupdate", version: "v0.0.0", platforms: []string{"linux-amd64", "linux-arm64"}, inline: true, groups: []k0sGroupFacts{static("workers", "controller0")}},
		}},
		{file: "inttest-ap-controllerworker.yaml", id: "TestControllerWorkerSuite/TestApply", commands: []k0sCommandFacts{
			{kind: "k0supdate", version: "v0.0.0", platforms: []string{"linux-amd64", "linux-arm64"}, force: true, groups: []k0sGroupFacts{controllers3, noWorkers}},
		}},
		{file: "inttest-ap-ha3x3.yaml", id: "id123", commands: []k0sCommandFacts{
			{kind: "k0supdate", version: "v1.34.1+k0s.0", platforms: []string{"linux-amd64"}, groups: []k0sGroupFacts{controllers3, static("workers", "worker0", "worker1", "worker2")}},
		}},
		{file: "inttest-ap-platformselect.yaml", id: "id123", commands: []k0sCommandFacts{
			{kind: "k0supdate", version: "v0.0.0", platforms: []string{"linux-amd64", "linux-arm64", "windows-amd64"}, force: true, groups: []k0sGroupFacts{static("controllers", "controller0")}},
		}},
		{file: "inttest-ap-quorum.yaml", id: "id123", commands: []k0sCommandFacts{
			{kind: "k0supdate", version: "v0.0.0", platforms: []string{"linux-amd64"}, force: true, groups: []k0sGroupFacts{controllers3}},
		}},
		{file: "inttest-ap-quorumsafety.yaml", id: "TestQuorumSafetySuite/TestApply", commands: []k0sCommandFacts{
			{kind: "k0supdate", version: "v0.0.0", platforms: []string{"linux-amd64"}, force: true, groups: []k0sGroupFacts{controllers3, noWorkers}},
		}},
		{file: "inttest-ap-removedapis.yaml", id: "id123", commands: []k0sCommandFacts{
			{kind: "k0supdate", version: "v99.99.99", platforms: []string{"linux-amd64", "linux-arm64"}, groups: []k0sGroupFacts{static("controllers", "controller0")}},
		}},
		{file: "inttest-ap-selector.yaml", id: "id123", commands: []k0sCommandFacts{
			{kind: "k0supdate", version: "v0.0.0", platforms: []string{"linux-amd64"}, force: true, groups: []k0sGroupFacts{
				selector("controllers", "foo=bar", "metadata.name=controller0"),
				selector("workers", "foo=bar", "metadata.name=worker1"),
			}},
		}},
		{file: "inttest-ap-single.yaml", id: "id123", commands: []k0sCommandFacts{
			{kind: "k0supdate", version: "v0.0.0", platforms: []string{"linux-amd64"}, force: true, groups: []k0sGroupFacts{static("controllers", "controller0")}},
		}},
	}

	// Every plan file has facts, and every fact a file.
	var files, listed []string
	for _, f := range k0sFixtureFiles(t) {
		files = append(files, filepath.Base(f))
	}
	for _, tc := range tests {
		listed = append(listed, tc.file)
	}
	sort.Strings(listed)
	require.Equal(t, files, listed, "the plans of testdata/k0s and the cases of this test")

	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata/k0s", tc.file))
			require.NoError(t, err)
			doc, err := autopilot.Decode(b)
			require.NoError(t, err)

			assert.Equal(t, "autopilot.k0sproject.io/v1beta2", doc.APIVersion)
			assert.Equal(t, "Plan", doc.Kind)
			if assert.NotNil(t, doc.Metadata) {
				assert.Equal(t, "autopilot", doc.Metadata.Name)
			}
			assert.Equal(t, tc.id, doc.Spec.ID)
			assert.Equal(t, "now", doc.Spec.Timestamp)

			var kinds, want []string
			for _, c := range doc.Spec.Commands {
				kinds = append(kinds, c.Kind)
			}
			for _, c := range tc.commands {
				want = append(want, c.kind)
			}
			require.Equal(t, want, kinds, "command kinds in order")

			for i, wc := range tc.commands {
				c := doc.Spec.Commands[i]
				var version string
				require.NoError(t, json.Unmarshal(c.Spec["version"], &version), "command %d version", i)
				assert.Equal(t, wc.version, version, "command %d version as written", i)

				var platforms map[string]map[string]string
				require.NoError(t, json.Unmarshal(c.Spec["platforms"], &platforms), "command %d platforms", i)
				var names []string
				for p, u := range platforms {
					names = append(names, p)
					assert.NotEmpty(t, u["url"], "command %d platform %s url", i, p)
					if wc.sha256 {
						assert.Len(t, u["sha256"], 64, "command %d platform %s sha256", i, p)
					}
				}
				sort.Strings(names)
				assert.Equal(t, wc.platforms, names, "command %d platforms", i)
				if wc.force {
					assert.JSONEq(t, "true", string(c.Spec["forceupdate"]), "command %d forceupdate", i)
				} else {
					assert.NotContains(t, c.Spec, "forceupdate", "command %d", i)
				}
				assert.Equal(t, wc.inline, c.InlineTargets, "command %d inline targets", i)

				groups := map[string]plan.CommandTargets{}
				var order []string
				for _, g := range c.Targets {
					groups[g.Group] = g
					order = append(order, g.Group)
				}
				var wantOrder []string
				for _, wg := range wc.groups {
					g, ok := groups[wg.name]
					if wg.none {
						// k0s discovers no node from an empty discovery.
						if ok {
							wantOrder = append(wantOrder, wg.name)
							assert.Empty(t, g.Discovery.Static, "command %d group %s nodes", i, wg.name)
							assert.Nil(t, g.Discovery.Selector, "command %d group %s selector", i, wg.name)
							assert.Empty(t, g.Discovery.Function, "command %d group %s function", i, wg.name)
						}
						continue
					}
					wantOrder = append(wantOrder, wg.name)
					if !assert.True(t, ok, "command %d has no group %s", i, wg.name) {
						continue
					}
					assert.Equal(t, wg.static, g.Discovery.Static, "command %d group %s static nodes", i, wg.name)
					assert.Len(t, g.Discovery.Static, len(wg.static), "command %d group %s number of static nodes", i, wg.name)
					assert.Equal(t, wg.selector, g.Discovery.Selector, "command %d group %s selector", i, wg.name)
					assert.Equal(t, wg.limit, g.Limit(), "command %d group %s concurrency", i, wg.name)
				}
				assert.Equal(t, wantOrder, order, "command %d target groups in order", i)
			}

			if tc.status == nil {
				assert.Nil(t, doc.Status)
			} else {
				assert.Equal(t, tc.status, doc.Status)
			}
		})
	}
}
