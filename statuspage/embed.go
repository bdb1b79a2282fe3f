package statuspage

import "embed"

//go:embed page.html
var pageFS embed.FS
