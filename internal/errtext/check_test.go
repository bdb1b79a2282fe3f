package errtext_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge/internal/errtext"
)

func TestWrongArticles(t *testing.T) {
	assert.Equal(t, []string{"a edge", "an plan"}, errtext.WrongArticles("converge: a edge report, an plan"))
	assert.Empty(t, errtext.WrongArticles("a user, a unique key, a one-off, an edge, an item, a plan"))
}

func TestProblems(t *testing.T) {
	prefixes := []string{"controller: ", "pgstore: "}
	tests := []struct {
		pkg, msg string
		want     int
	}{
		{"controller", "controller: handlers did not finish in time", 0},
		{"controller", "controller: controller host: controller handlers did not finish", 1},
		{"controller", "controller: x: controller: y", 1},
		{"controller", "pgstore: closed", 2},
		{"pgstore", "pgstore: cannot reach a edge", 1},
		{"", "not owned by converge", 0},
		{"", "pgstore: closed", 1},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			assert.Len(t, errtext.Problems(tt.pkg, tt.msg, prefixes), tt.want, "%q", errtext.Problems(tt.pkg, tt.msg, prefixes))
		})
	}
}
