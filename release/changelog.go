package main

import (
	"errors"
	"fmt"
	"strings"
)

// unreleasedHeading starts the section of CHANGELOG.md that collects, by
// hand, what the next release changes for users; a release turns it into
// the version's section.
const unreleasedHeading = "## Unreleased"

// ErrNoUnreleased says that CHANGELOG.md has no "## Unreleased" section to
// turn into the release's entry.
var ErrNoUnreleased = errors.New("release: CHANGELOG.md has no \"## Unreleased\" section")

// changelogEntry returns CHANGELOG.md with its Unreleased section turned
// into the entry of version v released on date, followed by the subjects
// of the commits since the previous release, and a new empty Unreleased
// section above it.
func changelogEntry(doc, v, date string, commits []string) (string, error) {
	lines := strings.Split(doc, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == unreleasedHeading {
			start = i
			break
		}
	}
	if start < 0 {
		return "", ErrNoUnreleased
	}
	end := len(lines)
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "## ") {
			end = i
			break
		}
	}
	body := strings.Trim(strings.Join(lines[start+1:end], "\n"), "\n")

	var b strings.Builder
	b.WriteString(strings.Join(lines[:start], "\n"))
	if start > 0 {
		b.WriteString("\n")
	}
	b.WriteString(unreleasedHeading + "\n\n")
	fmt.Fprintf(&b, "## %s — %s\n\n", v, date)
	if body != "" {
		b.WriteString(body + "\n\n")
	}
	if len(commits) > 0 {
		b.WriteString("### Commits\n\n")
		for _, c := range commits {
			b.WriteString("- " + c + "\n")
		}
		b.WriteString("\n")
	}
	rest := strings.Join(lines[end:], "\n")
	b.WriteString(rest)
	out := b.String()
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out, nil
}
