package batch

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
)

// Word layout of the record list of a Builder batch without headers, in
// words of the segment (after the stream framing): the root pointer, the
// RecordSet struct (its records pointer), the list tag, then per record 2
// data words and the key, value and headers pointers.
const (
	wRoot     = 0
	wRecords  = 1
	wTag      = 2
	wFirst    = 3
	recWords  = 5
	recKey    = 2
	recValue  = 3
	recHeader = 4
)

// segWord and putSegWord read and write word w of b's record list segment.
func segWord(b []byte, w int) uint64 {
	return binary.LittleEndian.Uint64(b[HeaderSize+8+8*w:])
}

func putSegWord(b []byte, w int, v uint64) {
	binary.LittleEndian.PutUint64(b[HeaderSize+8+8*w:], v)
}

// nearList is a near list pointer at word from to count elements of
// element size code elem at word to.
func nearList(from, to int, elem uint64, count uint64) uint64 {
	return uint64(uint32(int32(to-from-1)<<2)) | 1 | elem<<32 | count<<35
}

// ptrTarget is the word a near pointer at word at points to.
func ptrTarget(b []byte, at int) int {
	return at + 1 + int(int32(uint32(segWord(b, at)))>>2)
}

// agreeValidate runs Validate with and without the direct walk and fails
// unless both give the same header and the same error (or none). It
// returns the error.
func agreeValidate(t testing.TB, b []byte, lim Limits) error {
	t.Helper()
	hd, ed := validate(b, lim, true)
	hs, es := validate(b, lim, false)
	if (ed == nil) != (es == nil) || (ed != nil && ed.Error() != es.Error()) || hd != hs {
		t.Fatalf("direct and accessor walks disagree:\ndirect:    %v %+v\naccessors: %v %+v", ed, hd, es, hs)
	}
	return ed
}

// recordAt is the first word of record i.
func recordAt(i int) int { return wFirst + i*recWords }

// TestValidateDirectMatchesAccessors checks that Validate gives the same
// verdict and error through its direct walk as through the generated
// accessors, for valid batches and hostile ones: truncated lists,
// overlapping values (within and beyond the read limit), far pointers,
// pointers of other kinds and element sizes, bad list sizes, negative
// offsets, empty structs, and record-level failures.
func TestValidateDirectMatchesAccessors(t *testing.T) {
	plain := func(t *testing.T) []byte { return build(t, 20, 10) }
	tests := []struct {
		name   string
		make   func(t *testing.T) []byte
		lim    Limits
		accept bool
	}{
		{"plain", plain, Limits{}, true},
		{"plain, record limit met", plain, Limits{MaxRecordBytes: 13}, true},
		{"plain, record limit exceeded", plain, Limits{MaxRecordBytes: 12}, false},
		{"empty values and keys", func(t *testing.T) []byte {
			var bld Builder
			bld.Add(nil, nil, nil, 1)
			bld.Add([]byte{}, []byte{}, nil, 2)
			bld.Add([]byte("k"), nil, nil, 3)
			return mustBuild(t, &bld)
		}, Limits{}, true},
		{"headers (accessors only)", func(t *testing.T) []byte {
			var bld Builder
			bld.Add([]byte("k"), []byte("v"), []RecordHeader{{Key: "h", Value: []byte("x")}}, 1)
			bld.Add(nil, []byte("w"), nil, 2)
			return mustBuild(t, &bld)
		}, Limits{}, true},
		{"headers over the record limit", func(t *testing.T) []byte {
			var bld Builder
			bld.Add(nil, []byte("v"), []RecordHeader{{Key: "hh", Value: []byte("xx")}}, 1)
			return mustBuild(t, &bld)
		}, Limits{MaxRecordBytes: 4}, false},
		{"truncated list", func(t *testing.T) []byte {
			b := plain(t)
			return fuzzFixup(b[:len(b)-8], fixAll)
		}, Limits{}, false},
		{"values overlap, within the read limit", func(t *testing.T) []byte {
			b := plain(t)
			v0 := ptrTarget(b, recordAt(0)+recValue)
			for i := range 20 {
				at := recordAt(i) + recValue
				putSegWord(b, at, nearList(at, v0, 2, 10))
			}
			return fuzzFixup(b, fixAll)
		}, Limits{}, true},
		{"values overlap, beyond the read limit", func(t *testing.T) []byte {
			var bld Builder
			bld.Add(nil, bytes.Repeat([]byte("x"), 4000), nil, 1)
			for range 49 {
				bld.Add(nil, []byte{}, nil, 1)
			}
			b := mustBuild(t, &bld)
			v0 := ptrTarget(b, recordAt(0)+recValue)
			for i := range 50 {
				at := recordAt(i) + recValue
				putSegWord(b, at, nearList(at, v0, 2, 4000))
			}
			return fuzzFixup(b, fixAll)
		}, Limits{}, false},
		{"key through a far pointer", func(t *testing.T) []byte {
			b := plain(t)
			key := ptrTarget(b, recordAt(0)+recKey)
			n := segWord(b, recordAt(0)+recKey) >> 35
			b = append(b, make([]byte, 8)...) // the landing pad
			pad := (len(b)-HeaderSize-8)/8 - 1
			putSegWord(b, pad, nearList(pad, key, 2, n))
			putSegWord(b, recordAt(0)+recKey, 2|uint64(pad)<<3) // far, segment 0
			return fuzzFixup(b, fixAll)
		}, Limits{}, true},
		{"key through a far pointer out of bounds", func(t *testing.T) []byte {
			b := plain(t)
			putSegWord(b, recordAt(0)+recKey, 2|uint64(1<<20)<<3)
			return fuzzFixup(b, fixAll)
		}, Limits{}, false},
		{"root through a far pointer", func(t *testing.T) []byte {
			b := plain(t)
			b = append(b, make([]byte, 8)...)
			pad := (len(b)-HeaderSize-8)/8 - 1
			root := segWord(b, wRoot) // struct at word 1
			putSegWord(b, pad, root&^0xffffffff|uint64(uint32(int32(wRecords-pad-1)<<2)))
			putSegWord(b, wRoot, 2|uint64(pad)<<3)
			return fuzzFixup(b, fixAll)
		}, Limits{}, true},
		{"key as a struct pointer", func(t *testing.T) []byte {
			b := plain(t)
			at := recordAt(3) + recKey
			putSegWord(b, at, segWord(b, at)&0xfffffffc|1<<32) // one data word
			return fuzzFixup(b, fixAll)
		}, Limits{}, true},
		{"value of 2-byte elements", func(t *testing.T) []byte {
			b := plain(t)
			at := recordAt(2) + recValue
			putSegWord(b, at, nearList(at, ptrTarget(b, at), 3, 5))
			return fuzzFixup(b, fixAll)
		}, Limits{}, true},
		{"value longer than the segment", func(t *testing.T) []byte {
			b := plain(t)
			at := recordAt(19) + recValue
			putSegWord(b, at, nearList(at, ptrTarget(b, at), 2, 1<<20))
			return fuzzFixup(b, fixAll)
		}, Limits{}, false},
		{"value at a negative offset", func(t *testing.T) []byte {
			b := plain(t)
			at := recordAt(0) + recValue
			putSegWord(b, at, nearList(at, -2, 2, 1))
			return fuzzFixup(b, fixAll)
		}, Limits{}, false},
		{"value pointing into the list itself", func(t *testing.T) []byte {
			b := plain(t)
			at := recordAt(5) + recValue
			putSegWord(b, at, nearList(at, wTag, 2, 16))
			return fuzzFixup(b, fixAll)
		}, Limits{}, true},
		{"list word count too small", func(t *testing.T) []byte {
			b := plain(t)
			putSegWord(b, wRecords, nearList(wRecords, wTag, 7, 20*recWords-1))
			return fuzzFixup(b, fixAll)
		}, Limits{}, true},
		{"list word count past the segment", func(t *testing.T) []byte {
			b := plain(t)
			putSegWord(b, wRecords, nearList(wRecords, wTag, 7, 1<<28))
			return fuzzFixup(b, fixAll)
		}, Limits{}, false},
		{"records as a pointer list", func(t *testing.T) []byte {
			b := plain(t)
			putSegWord(b, wRecords, nearList(wRecords, wTag, 6, 20))
			return fuzzFixup(b, fixAll)
		}, Limits{}, false},
		{"records of empty structs", func(t *testing.T) []byte {
			b := build(t, 1, 3)
			putSegWord(b, wTag, 1<<2) // one element, no data, no pointers
			return fuzzFixup(b, fixAll)
		}, Limits{}, true},
		{"records with a short data section", func(t *testing.T) []byte {
			b := build(t, 1, 3)
			tag := segWord(b, wTag)
			putSegWord(b, wTag, tag&^(0xffff<<32)|1<<32) // one data word: no timestamp
			return fuzzFixup(b, fixAll)
		}, Limits{}, true},
		{"tag count over the header's", func(t *testing.T) []byte {
			b := plain(t)
			tag := segWord(b, wTag)
			putSegWord(b, wTag, tag&^0xffffffff|21<<2)
			return b
		}, Limits{}, false},
		{"wrong offsetDelta", func(t *testing.T) []byte {
			b := plain(t)
			putSegWord(b, recordAt(7), 8)
			return fuzzFixup(b, fixAll)
		}, Limits{}, false},
		{"negative record timestamp", func(t *testing.T) []byte {
			b := plain(t)
			putSegWord(b, recordAt(4)+1, uint64(1)<<63)
			return fuzzFixup(b, fixAll)
		}, Limits{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.make(t)
			err := agreeValidate(t, b, tc.lim)
			if (err == nil) != tc.accept {
				t.Fatalf("Validate = %v, want accept %v", err, tc.accept)
			}
			if err == nil {
				fast, ferr := iterAll(t, b, true)
				slow, serr := iterAll(t, b, false)
				if ferr != nil || serr != nil || !reflect.DeepEqual(fast, slow) {
					t.Fatalf("valid batch read differently: direct %v %+v\naccessors %v %+v", ferr, fast, serr, slow)
				}
			}
		})
	}
}

// TestValidateDirectTakesPlainBatches checks that a batch of the Builder
// without headers is shown valid by the direct walk alone.
func TestValidateDirectTakesPlainBatches(t *testing.T) {
	b := build(t, 100, 100)
	h, err := CheckHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := rawList(b[HeaderSize+8:], int(h.RecordCount))
	if !ok || !raw.valid(&h, 0, readLimit(b)) {
		t.Fatalf("a plain batch is left to the accessors (shape ok %v)", ok)
	}
	if allocs := testing.AllocsPerRun(10, func() { _, _ = Validate(b, Limits{}) }); allocs > 4 {
		t.Fatalf("Validate of 100 records allocates %v times", allocs)
	}
}

func mustBuild(t testing.TB, b *Builder) []byte {
	t.Helper()
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzValidateDirect checks that Validate's direct walk and the walk
// through the generated accessors agree, on mutated bytes (FuzzValidate's
// fix-ups) and on every record limit, and that an accepted batch reads the
// same both ways.
func FuzzValidateDirect(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, uint8(fixAll), uint16(0))
		f.Add(s, uint8(fixAll), uint16(3))
		f.Add(s, uint8(0), uint16(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, mask uint8, maxRecord uint16) {
		b := fuzzFixup(data, mask)
		if agreeValidate(t, b, Limits{MaxRecordBytes: int(maxRecord)}) != nil {
			return
		}
		fast, ferr := iterAll(t, b, true)
		slow, serr := iterAll(t, b, false)
		if ferr != nil || serr != nil || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("valid batch read differently: direct %v %+v\naccessors %v %+v", ferr, fast, serr, slow)
		}
	})
}

// FuzzValidateDirectPointers edits the pointer words of Builder batches
// (offsets, element sizes and counts, whole words, copies of other
// pointers) rather than random bytes, then repairs lengths, counts and
// CRC, so that the inputs reach the pointer checks of both walks; both
// must agree.
func FuzzValidateDirectPointers(f *testing.F) {
	var hb Builder
	hb.Add([]byte("k"), []byte("v"), []RecordHeader{{Key: "h", Value: []byte("x")}}, 1)
	hb.Add(nil, []byte("w"), nil, 2)
	seeds := [][]byte{build(f, 8, 5), build(f, 3, 17), mustBuild(f, &hb)}
	f.Add(uint8(0), []byte{}, uint16(0))
	f.Add(uint8(0), []byte{0, 5, 1, 2, 3, 4, 5, 6, 7, 8}, uint16(0))
	f.Add(uint8(1), []byte{1, 6, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, uint16(0))
	f.Add(uint8(2), []byte{3, 1, 5, 0, 0, 0, 0, 0, 0, 0}, uint16(4))
	f.Fuzz(func(t *testing.T, which uint8, edits []byte, maxRecord uint16) {
		b := append([]byte(nil), seeds[int(which)%len(seeds)]...)
		words := (len(b) - HeaderSize - 8) / 8
		for ; len(edits) >= 10; edits = edits[10:] {
			w := int(edits[1]) % words
			arg := binary.LittleEndian.Uint64(edits[2:])
			old := segWord(b, w)
			switch edits[0] % 5 {
			case 0: // flip bits
				putSegWord(b, w, old^arg)
			case 1: // move the offset
				off := int32(uint32(old)) >> 2
				off += int32(int8(arg))
				putSegWord(b, w, old&^0xfffffffc|uint64(uint32(off<<2)))
			case 2: // element size and count, or struct sizes
				putSegWord(b, w, old&0xffffffff|arg<<32)
			case 3: // copy the pointer at another word, keeping its target
				src := int(arg % uint64(words))
				p := segWord(b, src)
				off := int32(uint32(p))>>2 + int32(src-w)
				putSegWord(b, w, p&^0xfffffffc|uint64(uint32(off<<2)))
			case 4: // a far pointer to a word
				putSegWord(b, w, 2|(arg%uint64(words))<<3)
			}
		}
		b = fuzzFixup(b, fixAll)
		if agreeValidate(t, b, Limits{MaxRecordBytes: int(maxRecord)}) != nil {
			return
		}
		fast, ferr := iterAll(t, b, true)
		slow, serr := iterAll(t, b, false)
		if ferr != nil || serr != nil || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("valid batch read differently: direct %v %+v\naccessors %v %+v", ferr, fast, serr, slow)
		}
	})
}
