package wire

import (
	"strconv"
	"strings"
	"sync"
)

// Slot returns the Redis Cluster slot of key: CRC16 (XMODEM) of its hash
// tag (the text between its first '{' and the first '}' after it, when
// not empty), or of the whole key, modulo 16384.
func Slot(key string) uint16 {
	if tag, ok := hashTag(key); ok {
		key = tag
	}
	return crc16(key) % 16384
}

// hashTag returns the hash tag of key and true, or false if Redis hashes
// the whole key.
func hashTag(key string) (string, bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return "", false
	}
	return key[i+1 : i+1+j], true
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotTag returns the hash tag of lk's slot that a key beginning with
// "{"+tag+"}" takes: lk's own hash tag; lk itself when it has none and no
// '}' (so "{"+lk+"}" hashes as lk does); else, for a key with a '}' but
// no hash tag, the smallest decimal number that hashes to lk's slot.
func slotTag(lk string) string {
	if tag, ok := hashTag(lk); ok {
		return tag
	}
	if !strings.Contains(lk, "}") {
		return lk
	}
	return strconv.Itoa(int(numberOfSlot()[crc16(lk)%16384]))
}

// numberOfSlot maps each slot to the smallest decimal number (as a
// string) that hashes to it, computed once, when a key needs it (about a
// million CRCs of short strings).
var numberOfSlot = sync.OnceValue(func() *[16384]uint32 {
	var t [16384]uint32
	var seen [16384]bool
	left := len(t)
	for n := uint32(0); left > 0; n++ {
		s := crc16(strconv.FormatUint(uint64(n), 10)) % 16384
		if !seen[s] {
			seen[s], t[s] = true, n
			left--
		}
	}
	return &t
})
