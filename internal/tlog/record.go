// Package tlog is PCP's audit log on disk: an append-only sequence of
// segment files holding length-prefixed, checksummed records, one record
// per audit entry, with an RFC 6962 Merkle tree over the entries and
// signed checkpoints of that tree (C2SP tlog-checkpoint). docs/audit.md
// gives the format byte by byte.
//
// A record holds an entry's canonical form C(n) (internal/audit), the
// entry's chain hash and the hash before it, and the entry's leaf index in
// the tree (seq-1). The Merkle leaf of an entry is C(n) itself, so anyone
// holding an entry as audit.tail returns it can compute its leaf hash.
//
// The package does no chain checking of its own beyond the links between
// records (leaf indexes follow, each record's previous hash is the hash of
// the record before); internal/audit checks that the hashes are right.
package tlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// HashSize is the size of a chain hash and of a tree hash.
const HashSize = 32

const (
	// segMagic opens every segment file; its last byte is the format
	// version.
	segMagic = "PCPALOG\x01"
	// headerSize is the segment header: the magic and the leaf index of
	// the segment's first record.
	headerSize = len(segMagic) + 8
	// frameSize is a record's frame: body length and CRC-32C of the body.
	frameSize = 8
	// fixedBody is the part of a body before the canonical entry: leaf
	// index, previous hash, hash.
	fixedBody = 8 + 2*HashSize
	// MaxCanonical bounds the canonical entry of one record.
	MaxCanonical = 1 << 20
	maxBody      = fixedBody + MaxCanonical
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record is one entry of the log as stored.
type Record struct {
	// Index is the entry's leaf index: its seq minus one.
	Index uint64
	// Prev is the chain hash of the entry before (32 zero bytes for the
	// first), Hash the entry's own.
	Prev, Hash [HashSize]byte
	// Canonical is C(n), the entry's canonical JSON: the Merkle leaf.
	Canonical []byte
}

// Size is the number of bytes r takes in a segment.
func (r *Record) Size() int { return frameSize + fixedBody + len(r.Canonical) }

// AppendRecord appends the encoding of r to b.
func AppendRecord(b []byte, r *Record) []byte {
	n := fixedBody + len(r.Canonical)
	start := len(b)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = append(b, 0, 0, 0, 0) // the checksum, filled in below
	body := len(b)
	b = binary.BigEndian.AppendUint64(b, r.Index)
	b = append(b, r.Prev[:]...)
	b = append(b, r.Hash[:]...)
	b = append(b, r.Canonical...)
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(b[body:], castagnoli))
	return b
}

// Decoding errors. A *DecodeError wraps one of them.
var (
	// ErrShort: the bytes end inside the record (a torn write).
	ErrShort = errors.New("record cut short")
	// ErrLength: the length prefix is impossible.
	ErrLength = errors.New("record length out of range")
	// ErrChecksum: the body does not match its CRC-32C.
	ErrChecksum = errors.New("record checksum mismatch")
)

// DecodeRecord decodes the record at the start of b and returns it and
// the bytes it took. r.Canonical aliases b.
func DecodeRecord(b []byte) (Record, int, error) {
	if len(b) < frameSize {
		return Record{}, 0, ErrShort
	}
	n := int(binary.BigEndian.Uint32(b))
	if n < fixedBody || n > maxBody {
		return Record{}, 0, fmt.Errorf("%w: %d bytes", ErrLength, n)
	}
	if len(b)-frameSize < n {
		return Record{}, 0, ErrShort
	}
	body := b[frameSize : frameSize+n]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return Record{}, 0, ErrChecksum
	}
	var r Record
	r.Index = binary.BigEndian.Uint64(body)
	copy(r.Prev[:], body[8:])
	copy(r.Hash[:], body[8+HashSize:])
	r.Canonical = body[fixedBody:]
	return r, frameSize + n, nil
}

// appendHeader appends a segment header for a segment whose first record
// has leaf index first.
func appendHeader(b []byte, first uint64) []byte {
	b = append(b, segMagic...)
	return binary.BigEndian.AppendUint64(b, first)
}

// decodeHeader reads a segment header.
func decodeHeader(b []byte) (first uint64, err error) {
	if len(b) < headerSize {
		return 0, ErrShort
	}
	if string(b[:len(segMagic)]) != segMagic {
		return 0, fmt.Errorf("not a PCP audit log segment (magic %q)", b[:len(segMagic)])
	}
	return binary.BigEndian.Uint64(b[len(segMagic):]), nil
}
