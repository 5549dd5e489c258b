package tlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultSegmentSize is the size past which the log starts a new segment.
const DefaultSegmentSize = 64 << 20

// segSuffix ends a segment file's name; the name before it is the leaf
// index of the segment's first record, 20 decimal digits.
const segSuffix = ".log"

// Options configure Open.
type Options struct {
	// Sync makes every Append fsync (fdatasync) the segment before it
	// returns: an appended group then survives a power loss, not only a
	// killed process.
	Sync bool
	// SegmentSize is the size past which a new segment is started;
	// 0 selects DefaultSegmentSize.
	SegmentSize int64
	// Visit, if set, is called by Open with each record it reads, in
	// order; it must not keep r.Canonical.
	Visit func(r *Record)
}

// Damage describes a record that could not be read.
type Damage struct {
	// Segment is the file's name, Offset the record's byte offset in it.
	Segment string
	Offset  int64
	// Index is the leaf index the record should have had (its seq is
	// Index+1).
	Index uint64
	// Bytes is how many bytes from Offset to the end of the segment.
	Bytes   int64
	Problem string
}

func (d *Damage) String() string {
	return fmt.Sprintf("entry %d (segment %s, offset %d): %s", d.Index+1, d.Segment, d.Offset, d.Problem)
}

// Position is a place in the log between two records: where a Scan
// resumes.
type Position struct {
	// Segment is the index of the segment (in name order), Offset the
	// byte offset of the next record in it.
	Segment int
	Offset  int64
	// Index is the leaf index of the next record, Prev the hash of the
	// record before it (zero before the first).
	Index uint64
	Prev  [HashSize]byte
}

// ScanResult is what a Scan found.
type ScanResult struct {
	// End is the position after the last record read.
	End Position
	// Segments are the segment files, in order.
	Segments []string
	// Torn is set when the last segment ends inside a record: a write
	// that did not complete. Nothing after it was read.
	Torn *Damage
	// Corrupt is set when a record before the end cannot be read or does
	// not follow the one before it. Nothing after it was read.
	Corrupt *Damage
}

// Scan reads the log in dir from the position from (the zero Position:
// the start) and calls visit for each record in order, stopping after
// the record with leaf index upTo-1 (math.MaxUint64: every record); at
// is the position of the record. With links set a record whose leaf
// index or previous hash does not follow the record before is reported
// as Corrupt; without, such records are handed to visit, for a caller
// that checks the chain itself and names the break better. It
// changes nothing; a log being appended to may be scanned up to a size
// it is known to have reached. visit must not keep r.Canonical.
func Scan(dir string, from Position, upTo uint64, links bool, visit func(at Position, r *Record) error) (ScanResult, error) {
	names, err := segments(dir)
	if err != nil {
		return ScanResult{}, err
	}
	res := ScanResult{End: from, Segments: names}
	pos := from
	for si := from.Segment; si < len(names) && pos.Index < upTo; si++ {
		last := si == len(names)-1
		name := names[si]
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return res, fmt.Errorf("tlog: %w", err)
		}
		damage := func(off int64, problem string) *Damage {
			return &Damage{Segment: name, Offset: off, Index: pos.Index, Bytes: int64(len(data)) - off, Problem: problem}
		}
		off := int64(headerSize)
		if si == from.Segment && from.Offset > 0 {
			off = from.Offset
		} else {
			first, err := decodeHeader(data)
			switch {
			case errors.Is(err, ErrShort) && last && isPrefix(data, appendHeader(nil, pos.Index)):
				res.Torn = damage(0, fmt.Sprintf("the segment's header is cut short (%d bytes)", len(data)))
				return res, nil
			case err != nil:
				res.Corrupt = damage(0, err.Error())
				return res, nil
			case first != pos.Index:
				res.Corrupt = damage(0, fmt.Sprintf("the segment starts at leaf index %d, want %d: entries are missing or repeated", first, pos.Index))
				return res, nil
			case name != segName(first):
				res.Corrupt = damage(0, fmt.Sprintf("the segment's header says it starts at leaf index %d, but it is named %s", first, name))
				return res, nil
			}
		}
		for off < int64(len(data)) && pos.Index < upTo {
			r, n, err := DecodeRecord(data[off:])
			if err != nil {
				rest := data[off:]
				switch {
				case last && (errors.Is(err, ErrShort) || allZero(rest)):
					// A write cut short: by a killed process (a prefix of
					// the record), or by a power loss on a file system that
					// grew the file before its data reached the disk.
					res.Torn = damage(off, fmt.Sprintf("the last %d bytes are an incomplete record (%v)", len(rest), err))
				default:
					res.Corrupt = damage(off, fmt.Sprintf("%v: the log was altered or damaged", err))
				}
				res.End = pos
				return res, nil
			}
			if links && r.Index != pos.Index {
				res.Corrupt = damage(off, fmt.Sprintf("the record holds leaf index %d, want %d: entries are missing, repeated or reordered", r.Index, pos.Index))
				return res, nil
			}
			if links && r.Prev != pos.Prev {
				res.Corrupt = damage(off, fmt.Sprintf("the record's previous hash %x is not the hash %x of the entry before", r.Prev, pos.Prev))
				return res, nil
			}
			at := Position{Segment: si, Offset: off, Index: pos.Index, Prev: pos.Prev}
			if err := visit(at, &r); err != nil {
				return res, err
			}
			off += int64(n)
			pos = Position{Segment: si, Offset: off, Index: pos.Index + 1, Prev: r.Hash}
			res.End = pos
		}
	}
	return res, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func isPrefix(b, of []byte) bool { return len(b) <= len(of) && bytes.Equal(b, of[:len(b)]) }

// segName is the file name of the segment starting at leaf index first.
func segName(first uint64) string { return fmt.Sprintf("%020d%s", first, segSuffix) }

// segments lists the segment files of dir in order.
func segments(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tlog: %w", err)
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		stem, ok := strings.CutSuffix(n, segSuffix)
		if !ok || len(stem) != 20 || !e.Type().IsRegular() {
			continue
		}
		if _, err := strconv.ParseUint(stem, 10, 64); err != nil {
			continue
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// Exists reports whether dir holds a log (at least one segment).
func Exists(dir string) (bool, error) {
	names, err := segments(dir)
	return len(names) > 0, err
}

// Log is an open log, appended to by one process. Its methods are not
// safe for concurrent use: the caller serialises them.
type Log struct {
	dir  string
	opts Options

	lock  *os.File // holds the directory's lock file, flocked
	f     *os.File // the last segment
	fname string
	off   int64 // end of its last record
	// segs counts the segments.
	segs int

	tree Tree
	head [HashSize]byte

	// broken is set when the log must not be appended to: a record before
	// the end is damaged, or a failed write could not be undone.
	broken error

	buf []byte
	// leaf holds the leaf hash's input in Append.
	leaf []byte
}

// Recovery is what Open found and did.
type Recovery struct {
	Entries  uint64
	Segments int
	// Torn is the incomplete record Open cut off the end of the log; nil
	// if there was none.
	Torn *Damage
	// Corrupt is the first record that could not be read; the log is then
	// open for reading its intact prefix only, and Append fails.
	Corrupt *Damage
}

// Open opens the log in dir, creating dir (0700) and an empty log if
// there is none. It reads every record (rebuilding the Merkle tree),
// cuts off an incomplete record at the end, and reports what it found.
// A damaged record before the end does not fail Open: the log opens with
// the entries before it and refuses appends (Log.Err).
func Open(dir string, opts Options) (*Log, Recovery, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, Recovery{}, fmt.Errorf("tlog: %w", err)
	}
	l := &Log{dir: dir, opts: opts}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, Recovery{}, fmt.Errorf("tlog: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, Recovery{}, fmt.Errorf("tlog: the audit log in %s is open in another process: %w", dir, err)
	}
	l.lock = lock
	l, rec, err := l.open()
	if err != nil {
		lock.Close()
	}
	return l, rec, err
}

// lockName is the file in the log's directory that the appending process
// holds an exclusive flock on.
const lockName = "lock"

func (l *Log) open() (*Log, Recovery, error) {
	dir, opts := l.dir, l.opts
	res, err := Scan(dir, Position{}, math.MaxUint64, true, func(_ Position, r *Record) error {
		l.tree.Append(LeafHash(r.Canonical))
		if opts.Visit != nil {
			opts.Visit(r)
		}
		return nil
	})
	if err != nil {
		return nil, Recovery{}, err
	}
	rec := Recovery{Entries: res.End.Index, Segments: len(res.Segments), Torn: res.Torn, Corrupt: res.Corrupt}
	l.head = res.End.Prev
	l.segs = len(res.Segments)
	if res.Corrupt != nil {
		l.broken = fmt.Errorf("tlog: %s: the log cannot be appended to until it is repaired", res.Corrupt)
		return l, rec, nil
	}
	if len(res.Segments) == 0 {
		if err := l.create(0); err != nil {
			return nil, rec, err
		}
		return l, rec, nil
	}
	l.fname = res.Segments[len(res.Segments)-1]
	l.f, err = os.OpenFile(filepath.Join(dir, l.fname), os.O_RDWR, 0)
	if err != nil {
		return nil, rec, fmt.Errorf("tlog: %w", err)
	}
	l.off = res.End.Offset
	if res.End.Segment != len(res.Segments)-1 || l.off == 0 {
		// The last segment holds no whole record.
		l.off = 0
	}
	if res.Torn != nil {
		if err := l.f.Truncate(l.off); err != nil {
			l.f.Close()
			return nil, rec, fmt.Errorf("tlog: cutting off the incomplete record: %w", err)
		}
		if err := l.f.Sync(); err != nil {
			l.f.Close()
			return nil, rec, fmt.Errorf("tlog: %w", err)
		}
	}
	if l.off == 0 {
		// Rewrite the header of a segment torn before its first record.
		hdr := appendHeader(nil, l.tree.Size())
		if _, err := l.f.WriteAt(hdr, 0); err != nil {
			l.f.Close()
			return nil, rec, fmt.Errorf("tlog: %w", err)
		}
		l.off = int64(len(hdr))
	}
	return l, rec, nil
}

// create starts a new segment whose first record has leaf index first,
// with its header written; the caller closes the old one.
func (l *Log) create(first uint64) error {
	name := segName(first)
	f, err := os.OpenFile(filepath.Join(l.dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("tlog: %w", err)
	}
	hdr := appendHeader(nil, first)
	if _, err := f.Write(hdr); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("tlog: %w", err)
	}
	if l.opts.Sync {
		if err := syncDir(l.dir, f); err != nil {
			f.Close()
			return err
		}
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f, l.fname, l.off = f, name, int64(len(hdr))
	l.segs++
	return nil
}

func syncDir(dir string, f *os.File) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("tlog: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("tlog: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("tlog: %w", err)
	}
	return nil
}

// Err is why the log refuses appends; nil while it takes them.
func (l *Log) Err() error { return l.broken }

// Size is the number of entries.
func (l *Log) Size() uint64 { return l.tree.Size() }

// Head is the chain hash of the last entry (zero for an empty log).
func (l *Log) Head() [HashSize]byte { return l.head }

// Tree is the log's Merkle tree. It changes with Append.
func (l *Log) Tree() *Tree { return &l.tree }

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

// Append writes recs, which must continue the log (leaf indexes from
// Size, each Prev the hash before it), with one write(2), and with an
// fdatasync when Options.Sync is set. When it fails nothing is appended:
// the bytes written are cut off again (if that fails too, the log refuses
// every later append).
func (l *Log) Append(recs []Record) error {
	if l.broken != nil {
		return l.broken
	}
	if len(recs) == 0 {
		return nil
	}
	next, prev := l.tree.Size(), l.head
	b := l.buf[:0]
	for i := range recs {
		r := &recs[i]
		if r.Index != next || r.Prev != prev {
			return fmt.Errorf("tlog: record %d does not continue the log at leaf index %d", r.Index, next)
		}
		if len(r.Canonical) > MaxCanonical {
			return fmt.Errorf("tlog: entry %d is %d bytes, more than %d", r.Index+1, len(r.Canonical), MaxCanonical)
		}
		b = AppendRecord(b, r)
		next, prev = next+1, r.Hash
	}
	l.buf = b
	if l.off > int64(headerSize) && l.off+int64(len(b)) > l.opts.SegmentSize {
		if err := l.create(l.tree.Size()); err != nil {
			return err
		}
	}
	// Only this process appends; a segment of another size than it
	// wrote was changed by someone else (appended to, cut short), and
	// appending at l.off would write over or past what they did.
	var st unix.Stat_t
	if err := unix.Fstat(int(l.f.Fd()), &st); err != nil {
		return fmt.Errorf("tlog: %w", err)
	} else if st.Size != l.off {
		l.broken = fmt.Errorf("tlog: segment %s is %d bytes, but this process wrote %d: the log was changed by another process", l.fname, st.Size, l.off)
		return l.broken
	}
	if _, err := l.f.WriteAt(b, l.off); err != nil {
		return l.undo(err)
	}
	if l.opts.Sync {
		if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
			return l.undo(err)
		}
	}
	l.off += int64(len(b))
	for i := range recs {
		// 0x00 || C(n), hashed from one buffer: no allocation per leaf.
		l.leaf = append(append(l.leaf[:0], 0), recs[i].Canonical...)
		l.tree.Append(sha256.Sum256(l.leaf))
	}
	l.head = prev
	return nil
}

// undo cuts off what a failed append may have written.
func (l *Log) undo(err error) error {
	err = fmt.Errorf("tlog: appending to %s: %w", l.fname, err)
	if terr := l.f.Truncate(l.off); terr != nil {
		l.broken = fmt.Errorf("%w; cutting the partial write off failed too: %w", err, terr)
		return l.broken
	}
	return err
}

// Close closes the segment file and lets the log go.
func (l *Log) Close() error {
	var err error
	if l.f != nil {
		err = l.f.Close()
		l.f = nil
	}
	if l.lock != nil {
		l.lock.Close()
		l.lock = nil
	}
	if err != nil {
		return fmt.Errorf("tlog: %w", err)
	}
	return nil
}
