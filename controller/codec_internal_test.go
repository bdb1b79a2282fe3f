package controller

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// codecObjects are objects that encodeObject writes itself and objects
// it leaves to json.Marshal.
func codecObjects() map[string]Object {
	since := time.Date(2026, 12, 5, 12, 30, 1, 123456789, time.UTC)
	east := time.FixedZone("east", 5*3600+30*60)
	return map[string]Object{
		"state and time":         {State: "new", Since: since},
		"reason":                 {State: "done", Since: since, Reason: "handled"},
		"priority":               {State: "new", Since: since, Priority: 7},
		"reason and priority":    {State: "a b", Since: since, Reason: "r", Priority: 100},
		"zero time":              {State: "new"},
		"whole seconds":          {State: "new", Since: since.Truncate(time.Second)},
		"zone":                   {State: "new", Since: since.In(east)},
		"zone with seconds":      {State: "new", Since: since.In(time.FixedZone("odd", 3600+7))},
		"year 10000":             {State: "new", Since: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"html in state":          {State: "<b>&", Since: since},
		"quote in reason":        {State: "new", Since: since, Reason: `say "hi"`},
		"unicode in state":       {State: "prêt", Since: since},
		"line separator":         {State: "new", Since: since, Reason: "a\u2028b"},
		"control in reason":      {State: "new", Since: since, Reason: "a\tb"},
		"data":                   {State: "new", Since: since, Data: json.RawMessage(`{"a": 1}`)},
		"empty data":             {State: "new", Since: since, Data: json.RawMessage{}},
		"intents":                {State: "new", Since: since, Intents: []string{"delete"}},
		"empty intents":          {State: "new", Since: since, Intents: []string{}},
		"failures":               {State: "new", Since: since, Failures: 1, Retries: 1, LastError: &Failure{At: since, Error: "x"}},
		"failing since":          {State: "new", Since: since, FailingSince: since},
		"recent failures":        {State: "new", Since: since, RecentFailures: []Failure{{At: since, Error: "x"}}},
		"halted":                 {State: "new", Since: since, Halted: HaltTerminal},
		"sla":                    {State: "new", Since: since, SLABreached: true},
		"watches":                {State: "new", Since: since, Watches: []Ref{{Kind: "rack", Key: "r1"}}},
		"negative priority":      {State: "new", Since: since, Priority: -3},
		"empty state":            {Since: since},
		"backslash in the state": {State: `a\b`, Since: since},
	}
}

// TestEncodeObjectIsJSONMarshal: encodeObject writes every object as
// json.Marshal does, byte for byte, and fails where it fails.
func TestEncodeObjectIsJSONMarshal(t *testing.T) {
	for name, obj := range codecObjects() {
		t.Run(name, func(t *testing.T) {
			want, wantErr := json.Marshal(&obj)
			got, err := encodeObject(&obj)
			if wantErr != nil {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
		})
	}
}

// TestEncodeObjectWritesPlainObjectsItself: the objects a handled
// object mostly is are written without json.Marshal, and read back
// without json.Unmarshal.
func TestEncodeObjectWritesPlainObjectsItself(t *testing.T) {
	objs := codecObjects()
	for _, name := range []string{"state and time", "reason", "priority", "reason and priority", "zero time", "zone"} {
		obj := objs[name]
		assert.True(t, plainObject(&obj), name)
		b, err := encodeObject(&obj)
		require.NoError(t, err)
		var back Object
		assert.True(t, plainDecode(b, &back), "%s is read back without json.Unmarshal", name)
		assert.True(t, obj.Since.Equal(back.Since), name)
		back.Since = obj.Since // JSON keeps the offset, not the zone's name
		assert.Equal(t, obj, back, name)
	}
	for _, name := range []string{"zone with seconds", "year 10000", "html in state", "quote in reason", "unicode in state", "data", "intents", "halted", "watches"} {
		obj := objs[name]
		assert.False(t, plainObject(&obj), name)
	}
}

// TestUnmarshalObjectIsJSONUnmarshal: unmarshalObject reads every
// document as json.Unmarshal does, errors included, whether it reads it
// itself or not.
func TestUnmarshalObjectIsJSONUnmarshal(t *testing.T) {
	docs := map[string]string{}
	for name, obj := range codecObjects() {
		b, err := json.Marshal(&obj)
		if err == nil {
			docs[name] = string(b)
		}
	}
	for name, doc := range map[string]string{
		"spaces":                 `{ "state": "new", "since": "2026-12-05T12:30:01Z" }`,
		"other order":            `{"since":"2026-12-05T12:30:01Z","state":"new"}`,
		"upper-case key":         `{"State":"new","since":"2026-12-05T12:30:01Z"}`,
		"trailing space":         `{"state":"new","since":"2026-12-05T12:30:01Z"} `,
		"trailing garbage":       `{"state":"new","since":"2026-12-05T12:30:01Z"}x`,
		"bad time":               `{"state":"new","since":"yesterday"}`,
		"time without zone":      `{"state":"new","since":"2026-12-05T12:30:01"}`,
		"escaped state":          `{"state":"n\u0065w","since":"2026-12-05T12:30:01Z"}`,
		"invalid UTF-8":          "{\"state\":\"\xff\",\"since\":\"2026-12-05T12:30:01Z\"}",
		"leading zero":           `{"state":"new","since":"2026-12-05T12:30:01Z","priority":01}`,
		"minus zero":             `{"state":"new","since":"2026-12-05T12:30:01Z","priority":-0}`,
		"lone minus":             `{"state":"new","since":"2026-12-05T12:30:01Z","priority":-}`,
		"fraction":               `{"state":"new","since":"2026-12-05T12:30:01Z","priority":1.5}`,
		"huge priority":          `{"state":"new","since":"2026-12-05T12:30:01Z","priority":99999999999999999999}`,
		"priority before reason": `{"state":"new","since":"2026-12-05T12:30:01Z","priority":2,"reason":"r"}`,
		"unknown field":          `{"state":"new","since":"2026-12-05T12:30:01Z","color":"red"}`,
		"state only":             `{"state":"new"}`,
		"truncated":              `{"state":"new","since":"2026-12-05T12:30:01Z"`,
		"null":                   `null`,
		"empty":                  ``,
	} {
		docs[name] = doc
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) { sameAsJSON(t, []byte(doc)) })
	}
}

// sameAsJSON checks that unmarshalObject reads doc as json.Unmarshal
// does.
func sameAsJSON(t *testing.T, doc []byte) {
	t.Helper()
	var want, got Object
	wantErr := json.Unmarshal(doc, &want)
	gotErr := unmarshalObject(doc, &got)
	if wantErr != nil {
		assert.Error(t, gotErr, "%q", doc)
		return
	}
	require.NoError(t, gotErr, "%q", doc)
	assert.Equal(t, want, got, "%q", doc)
	assert.True(t, want.Since.Equal(got.Since), "%q", doc)
}

// FuzzUnmarshalObject: unmarshalObject reads any document as
// json.Unmarshal does.
func FuzzUnmarshalObject(f *testing.F) {
	for _, obj := range codecObjects() {
		if b, err := json.Marshal(&obj); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"state":"new","since":"2026-12-05T12:30:01+05:30","reason":"r","priority":12}`))
	f.Fuzz(func(t *testing.T, doc []byte) { sameAsJSON(t, doc) })
}
