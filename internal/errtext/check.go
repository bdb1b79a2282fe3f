package errtext

import (
	"regexp"
	"strings"
)

// articlePair is "a" or "an" and the word after it.
var articlePair = regexp.MustCompile(`(?i)\b(an?) ([a-z]+)`)

// WrongArticles returns the pairs of msg with the wrong article: "a"
// before a vowel sound ("a edge", "a invalid"), "an" before a consonant
// sound. Words starting with "one", "uni", "use", "usu" and "eu" sound as
// consonants.
func WrongArticles(msg string) []string {
	var out []string
	for _, m := range articlePair.FindAllStringSubmatch(msg, -1) {
		w := strings.ToLower(m[2])
		vowel := strings.ContainsRune("aeiou", rune(w[0]))
		for _, p := range []string{"one", "uni", "use", "usu", "eu"} {
			if strings.HasPrefix(w, p) {
				vowel = false
			}
		}
		if vowel != (strings.ToLower(m[1]) == "an") {
			out = append(out, m[0])
		}
	}
	return out
}

// Problems returns what keeps msg, the message of an error of the package
// pkg, from reading once: it must start with "pkg: " (an embedded
// sentinel, pkg "", carries no prefix), carry none of prefixes other than
// its own and its own once, not name the package again as its subject
// ("controller: controller host"), and use the right articles.
func Problems(pkg, msg string, prefixes []string) []string {
	var out []string
	own := pkg + ": "
	if pkg != "" && !strings.HasPrefix(msg, own) {
		out = append(out, "does not start with "+own)
	}
	for _, p := range prefixes {
		n := strings.Count(msg, p)
		switch {
		case pkg != "" && p == own && n > 1:
			out = append(out, "prefix "+p+"appears more than once")
		case (pkg == "" || p != own) && n > 0:
			out = append(out, "prefix "+p+"does not belong")
		}
	}
	if pkg != "" && strings.HasPrefix(strings.TrimPrefix(msg, own), pkg+" ") {
		out = append(out, "names the package again as its subject")
	}
	for _, a := range WrongArticles(msg) {
		out = append(out, "wrong article: "+a)
	}
	return out
}
