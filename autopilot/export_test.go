package autopilot

// DecodeFast and DecodeSlow expose the two paths of Decode to the
// differential tests; neither validates.
var (
	DecodeFast = decodeFast
	DecodeSlow = decodeSlow
	Validate   = validateDocument
)
