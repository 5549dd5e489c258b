package x11

import (
	"bytes"
	"image"
	"image/png"
	"math/rand/v2"
	"testing"
)

func TestEncodePNG(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range [][2]int{{1, 1}, {3, 2}, {64, 17}, {300, 200}} {
		img := image.NewRGBA(image.Rect(0, 0, size[0], size[1]))
		for i := range img.Pix {
			img.Pix[i] = byte(r.IntN(256))
			if i%4 == 3 {
				img.Pix[i] = 0xff
			}
		}
		raw, err := encodePNG(img)
		if err != nil {
			t.Fatal(err)
		}
		got, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%v: %v", size, err)
		}
		if got.Bounds() != img.Bounds() {
			t.Fatalf("%v: got bounds %v", size, got.Bounds())
		}
		for y := 0; y < size[1]; y++ {
			for x := 0; x < size[0]; x++ {
				gr, gg, gb, ga := got.At(x, y).RGBA()
				wr, wg, wb, wa := img.At(x, y).RGBA()
				if gr != wr || gg != wg || gb != wb || ga != wa {
					t.Fatalf("%v: pixel %d,%d: got %v, want %v", size, x, y, got.At(x, y), img.At(x, y))
				}
			}
		}
	}
}
