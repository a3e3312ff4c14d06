package ring

// skipEmpty returns bufs without its empty buffers (copying only if needed).
func skipEmpty(bufs [][]byte) [][]byte {
	for i, b := range bufs {
		if len(b) == 0 {
			out := append([][]byte(nil), bufs[:i]...)
			for _, b := range bufs[i+1:] {
				if len(b) > 0 {
					out = append(out, b)
				}
			}
			return out
		}
	}
	return bufs
}

// advance returns bufs with its first n bytes consumed. It does not modify
// the caller's slice headers in place beyond re-slicing.
func advance(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			rest := append([][]byte{bufs[0][n:]}, bufs[1:]...)
			return rest
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	return bufs
}
