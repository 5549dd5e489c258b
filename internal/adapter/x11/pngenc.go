package x11

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
)

// encodePNG encodes an opaque RGBA image as an 8-bit RGB PNG, every row
// with the Up filter, deflated at BestSpeed. image/png tries each of the
// five filters on every row and keeps the best, which is more than half
// of its time at BestSpeed; Up alone costs a subtraction a byte and
// suits screens, whose rows repeat the ones above them.
func encodePNG(img *image.RGBA) ([]byte, error) {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	var out bytes.Buffer
	out.Grow(w * h / 4)
	out.WriteString("\x89PNG\r\n\x1a\n")
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 8, 2 // 8 bits, RGB; compression, filter, interlace 0
	writeChunk(&out, "IHDR", ihdr[:])

	var idat bytes.Buffer
	idat.Grow(w * h / 4)
	zw, err := zlib.NewWriterLevel(&idat, zlib.BestSpeed)
	if err != nil {
		return nil, err
	}
	row := make([]byte, 1+3*w)
	prev := make([]byte, 3*w)
	cur := make([]byte, 3*w)
	for y := 0; y < h; y++ {
		src := img.Pix[y*img.Stride : y*img.Stride+4*w]
		for x, j := 0, 0; x < 4*w; x, j = x+4, j+3 {
			cur[j], cur[j+1], cur[j+2] = src[x], src[x+1], src[x+2]
		}
		row[0] = 2 // Up
		for i, c := range cur {
			row[1+i] = c - prev[i]
		}
		if _, err := zw.Write(row); err != nil {
			return nil, err
		}
		prev, cur = cur, prev
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	writeChunk(&out, "IDAT", idat.Bytes())
	writeChunk(&out, "IEND", nil)
	return out.Bytes(), nil
}

func writeChunk(b *bytes.Buffer, typ string, data []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(data)))
	b.Write(n[:])
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	crc.Write(data)
	b.WriteString(typ)
	b.Write(data)
	binary.BigEndian.PutUint32(n[:], crc.Sum32())
	b.Write(n[:])
}
