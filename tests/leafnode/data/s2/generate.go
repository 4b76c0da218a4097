// Writes the golden S2 streams test_s2.py reads: go mod init s2gold && go get
// github.com/klauspost/compress/s2@v1.20.4 && go run generate.go (in a scratch directory).
package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/klauspost/compress/s2"
)

func input() []byte {
	var b bytes.Buffer
	// JSON-ish messages, some exact repeats (repeat offsets), and a pseudo-random tail.
	for i := 0; i < 1500; i++ {
		fmt.Fprintf(&b, "LMSG sensors.%d.temp 12\r\n{\"t\":%d,\"v\":%d}\r\n", i%7, i, (i*37)%101)
	}
	x := uint32(12345)
	for i := 0; i < 2000; i++ {
		x = x*1103515245 + 12345
		b.WriteByte(byte(x >> 16))
	}
	b.Write(bytes.Repeat([]byte("abcabcabd"), 9000))
	return b.Bytes()
}

func main() {
	in := input()
	os.WriteFile("input.bin", in, 0o644)
	modes := map[string][]s2.WriterOption{
		"uncompressed": {s2.WriterConcurrency(1), s2.WriterUncompressed()},
		"fast":         {s2.WriterConcurrency(1)},
		"better":       {s2.WriterConcurrency(1), s2.WriterBetterCompression()},
		"best":         {s2.WriterConcurrency(1), s2.WriterBestCompression()},
	}
	for name, opts := range modes {
		var out bytes.Buffer
		w := s2.NewWriter(&out, opts...)
		w.Write(in)
		w.Close()
		os.WriteFile(name+".s2", out.Bytes(), 0o644)
	}
	// Decode a stream jetlake wrote, when given (the reference reading ours).
	if len(os.Args) > 1 {
		data, _ := os.ReadFile(os.Args[1])
		r := s2.NewReader(bytes.NewReader(data))
		var got bytes.Buffer
		_, err := got.ReadFrom(r)
		fmt.Println("decode:", err, got.Len())
		os.WriteFile(os.Args[1]+".out", got.Bytes(), 0o644)
	}
}
