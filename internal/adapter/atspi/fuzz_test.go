package atspi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pcp-dev/pcp/internal/golden"

	"github.com/godbus/dbus/v5"
)

// Fuzz targets for the paths that decode what applications send. The
// seeds are real replies' shapes: GetItems in both layouts, an event
// signal, Accessible and Value properties, extents, actions.

// seedMessages are D-Bus messages as an application sends them.
func seedMessages() []*dbus.Message {
	reply := func(body ...any) *dbus.Message {
		return &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldReplySerial: dbus.MakeVariant(uint32(7)),
			dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(body...)),
		}, Body: body}
	}
	type r struct {
		Bus  string
		Path dbus.ObjectPath
	}
	type itemNew struct {
		Obj, App, Parent r
		Index, Count     int32
		Ifaces           []string
		Name             string
		Role             uint32
		Desc             string
		States           []uint32
	}
	type itemOld struct {
		Obj, App, Parent r
		Children         []r
		Ifaces           []string
		Name             string
		Role             uint32
		Desc             string
		States           []uint32
	}
	ifs := []string{"org.a11y.atspi.Accessible", "org.a11y.atspi.Action", "org.a11y.atspi.Component", "org.a11y.atspi.Text"}
	sig := &dbus.Message{Type: dbus.TypeSignal, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldPath:      dbus.MakeVariant(dbus.ObjectPath("/org/a11y/atspi/accessible/152")),
		dbus.FieldInterface: dbus.MakeVariant("org.a11y.atspi.Event.Object"),
		dbus.FieldMember:    dbus.MakeVariant("StateChanged"),
		dbus.FieldSignature: dbus.MakeVariant(dbus.ParseSignatureMust("siiva{sv}")),
	}, Body: []any{"checked", int32(1), int32(0), dbus.MakeVariant(int32(0)), map[string]dbus.Variant{}}}
	return []*dbus.Message{
		reply([]itemNew{
			{r{":1.0", rootPath}, r{":1.0", rootPath}, r{":1.2", rootPath}, -1, 1, ifs[:1], "gtk3-widget-factory", 75, "", []uint32{0, 0}},
			{r{":1.0", "/org/a11y/atspi/accessible/1"}, r{":1.0", rootPath}, r{":1.0", rootPath}, 0, 1, ifs, "Window", 23, "", []uint32{0x43000900, 0}},
			{r{":1.0", "/org/a11y/atspi/accessible/2"}, r{":1.0", rootPath}, r{":1.0", "/org/a11y/atspi/accessible/1"}, 0, 0, ifs, "2 2", 43, "d", []uint32{1 << 24, 1}},
		}),
		reply([]itemOld{
			{r{":1.3", "/a"}, r{":1.3", rootPath}, r{":1.3", rootPath}, []r{{":1.3", "/a/b"}}, ifs, "n\u00e9", 39, "", []uint32{0}},
		}),
		reply([]r{{":1.0", "/org/a11y/atspi/accessible/3"}, {"", nullPath}}),
		reply(map[string]dbus.Variant{"Name": dbus.MakeVariant("Title"), "ChildCount": dbus.MakeVariant(int32(3)),
			"Parent": dbus.MakeVariant(r{":1.0", rootPath}), "Description": dbus.MakeVariant("")}),
		reply(map[string]dbus.Variant{"CurrentValue": dbus.MakeVariant(5.0), "MinimumValue": dbus.MakeVariant(0.0),
			"MaximumValue": dbus.MakeVariant(100.0), "MinimumIncrement": dbus.MakeVariant(1.0)}),
		reply(struct{ X, Y, W, H int32 }{1, 2, 30, 40}),
		reply([]struct{ Name, Desc, Key string }{{"Click", "Clicks the button", "<Space>"}}),
		reply([]uint32{0x43000900, 1}),
		reply("some text \u2603"),
		sig,
	}
}

func encode(t testing.TB, m *dbus.Message) []byte {
	var b bytes.Buffer
	if err := m.EncodeTo(&b, binary.LittleEndian); err != nil {
		t.Fatalf("encoding seed %v: %v", m, err)
	}
	return b.Bytes()
}

// checkDecoded holds decoded data to the decoders' contract.
func checkDecoded(t *testing.T, items []cacheItem) {
	for _, it := range items {
		for _, s := range []string{it.name, it.desc} {
			if !utf8.ValidString(s) || len(s) > maxNameBytes || strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("decoded string %q: valid %v, %d bytes", s, utf8.ValidString(s), len(s))
			}
		}
		if !it.obj.path.IsValid() || !validBusName(it.obj.bus) || it.childCount < 0 || len(it.children) > maxChildren {
			t.Fatalf("decoded item %+v breaks the contract", it)
		}
		_ = RoleName(it.role)
		_ = it.states.names()
	}
}

// exercise runs every decoder on a message body, and the matching and
// tree building on what they give.
func exercise(t *testing.T, body []any) {
	items, _, _, _ := decodeItems(body, 256)
	checkDecoded(t, items)
	work := map[dbus.ObjectPath]*node{}
	if len(items) > 0 {
		buildFromItems(work, items, items[0].obj.bus)
		tr := &tree{bus: items[0].obj.bus, nodes: work, maxUp: 66}
		best(tr.find(&Target{Name: "2", Ancestor: &Target{Role: "frame"}}))
		for p := range work {
			_ = tr.visibility(work[p])
		}
	}
	for _, v := range body {
		if it, err := decodeCacheItem(v); err == nil {
			checkDecoded(t, []cacheItem{it})
		}
		if r, err := decodeRef(v); err == nil && !r.path.IsValid() {
			t.Fatalf("decodeRef gave invalid path %q", r.path)
		}
		decodeRefs(v)
		decodeStates(v)
		decodeIfaces(v)
		if names, err := decodeActionNames(v); err == nil {
			for _, n := range names {
				if !utf8.ValidString(n) || len(n) > maxNameBytes {
					t.Fatalf("action name %q", n)
				}
			}
		}
		if ni, err := decodeAccessibleProps(v); err == nil && (!utf8.ValidString(ni.name) || len(ni.name) > maxNameBytes || ni.childCount < 0) {
			t.Fatalf("accessible props %+v", ni)
		}
		decodeValue(v)
		if _, _, w, h, err := decodeExtents(v); err == nil && (w < 0 || h < 0) {
			t.Fatalf("negative extents %d×%d", w, h)
		}
		if s, ok := eventString(v); ok && (!utf8.ValidString(s) || len(s) > maxNameBytes) {
			t.Fatalf("event string %q", s)
		}
	}
	for _, name := range []string{"org.a11y.atspi.Event.Object.StateChanged", "org.a11y.atspi.Event.Object.ChildrenChanged", "org.a11y.atspi.Event.Focus.Focus"} {
		if ev, ok := decodeEvent(name, ":1.0", "/a", body); ok && !utf8.ValidString(ev.detail) {
			t.Fatalf("event detail %q", ev.detail)
		}
	}
}

// FuzzDecodeReply feeds arbitrary bytes through godbus's message decoder
// into every decoder of application data.
func FuzzDecodeReply(f *testing.F) {
	for _, m := range seedMessages() {
		f.Add(encode(f, m))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msg, err := dbus.DecodeMessage(bytes.NewReader(data))
		if err != nil {
			return
		}
		exercise(t, msg.Body)
	})
}

// FuzzCacheItem builds cache items field by field, with shape choosing
// which field has the wrong type or is missing.
type cacheItemSeed struct {
	bus, path, parent string
	index, count      int32
	iface, name       string
	role              uint32
	desc              string
	s0, s1            uint32
	shape             uint8
}

var cacheItemSeeds = []cacheItemSeed{
	{":1.0", "/org/a11y/atspi/accessible/2", "/org/a11y/atspi/accessible/1", 0, 0, "org.a11y.atspi.Action", "2 2", 43, "", 0x43000900, 0, 0},
	{":1.3", "/a", "/", -1, -7, "", "\xff\x00", 1 << 31, "\xfe", 0xffffffff, 0xffffffff, 9},
	{":1.3", "/org/gnome/Calculator/a11y/b5d4", "/org/a11y/atspi/accessible/root", 0, 1, "org.a11y.atspi.Component", "Calculator", 23, "", 0x43000002, 0, 2},
	{"org.a11y.atspi.Registry", "/org/a11y/atspi/null", "", 3, 2, "org.a11y.atspi.Value", "", 51, "slider", 0, 1 << 11, 3},
}

func FuzzCacheItem(f *testing.F) {
	for _, s := range cacheItemSeeds {
		f.Add(s.bus, s.path, s.parent, s.index, s.count, s.iface, s.name, s.role, s.desc, s.s0, s.s1, s.shape)
	}
	f.Fuzz(func(t *testing.T, bus, path, parent string, index, count int32, iface, name string, role uint32, desc string, s0, s1 uint32, shape uint8) {
		fields := []any{
			[]any{bus, dbus.ObjectPath(path)}, []any{bus, rootPath}, []any{bus, dbus.ObjectPath(parent)},
			index, count, []string{iface, "org.a11y.atspi.Text"}, name, role, desc, []uint32{s0, s1},
		}
		switch shape % 12 {
		case 1:
			fields = fields[:int(shape)%len(fields)]
		case 2:
			fields[3] = []any{[]any{bus, dbus.ObjectPath(path)}}
			fields = append(fields[:4], fields[5:]...) // the older layout
		case 3:
			fields[int(shape)%len(fields)] = name
		case 4:
			fields[0] = []any{bus}
		case 5:
			fields[9] = []uint32{}
		}
		it, err := decodeCacheItem(fields)
		if err == nil {
			checkDecoded(t, []cacheItem{it})
		}
		exercise(t, []any{[]any{fields}})
	})
}

// TestFuzzSeeds writes the seed corpora with -update and otherwise checks
// they decode as godbus messages.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeReply")
	if *golden.Update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, m := range seedMessages() {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", encode(t, m))
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	itemDir := filepath.Join("testdata", "fuzz", "FuzzCacheItem")
	if *golden.Update {
		if err := os.MkdirAll(itemDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range cacheItemSeeds {
			body := fmt.Sprintf("go test fuzz v1\nstring(%q)\nstring(%q)\nstring(%q)\nint32(%d)\nint32(%d)\nstring(%q)\nstring(%q)\nuint32(%d)\nstring(%q)\nuint32(%d)\nuint32(%d)\nuint8(%d)\n",
				s.bus, s.path, s.parent, s.index, s.count, s.iface, s.name, s.role, s.desc, s.s0, s.s1, s.shape)
			if err := os.WriteFile(filepath.Join(itemDir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no seeds in %s (run go test -run TestFuzzSeeds -update): %v", dir, err)
	}
}
