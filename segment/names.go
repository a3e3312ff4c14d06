package segment

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// File names in a partition directory.
const (
	logSuffix         = ".log"
	indexSuffix       = ".index"
	timeIndexSuffix   = ".timeindex"
	tmpSuffix         = ".sqtmp"
	recoveryPointName = "recovery-point"
	nameDigits        = 20
)

// callerFiles are the names in a partition directory that belong to the
// Log's caller (the engine's replication and producer state,
// docs/architecture.md §3.1): Open leaves them alone without a warning.
var callerFiles = map[string]bool{
	"leader-epoch-checkpoint":       true,
	"replication-offset-checkpoint": true,
	"producer-state":                true,
}

// FileNames returns the names of the files of the segment with base
// offset base in its partition directory: the batches (.log), the offset
// index (.index) and the time index (.timeindex).
func FileNames(base uint64) (log, index, timeIndex string) {
	b := baseName(base)
	return b + logSuffix, b + indexSuffix, b + timeIndexSuffix
}

// baseName returns the 20-digit file name stem of base offset base.
func baseName(base uint64) string { return fmt.Sprintf("%020d", base) }

func logPath(dir string, base uint64) string {
	return filepath.Join(dir, baseName(base)+logSuffix)
}

func indexPath(dir string, base uint64) string {
	return filepath.Join(dir, baseName(base)+indexSuffix)
}

// parseName splits a segment file name into its base offset and suffix.
// ok is false for names that are not <20 digits><suffix>.
func parseName(name string) (base uint64, suffix string, ok bool) {
	dot := strings.IndexByte(name, '.')
	if dot != nameDigits {
		return 0, "", false
	}
	for _, c := range name[:dot] {
		if c < '0' || c > '9' {
			return 0, "", false
		}
	}
	base, err := strconv.ParseUint(name[:dot], 10, 64)
	if err != nil {
		return 0, "", false
	}
	return base, name[dot:], true
}
