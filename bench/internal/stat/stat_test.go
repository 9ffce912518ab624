package stat

import (
	"math"
	"testing"
)

func TestStats(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	if got := Median(xs); got != 3 {
		t.Errorf("Median = %v, want 3", got)
	}
	if got := Percentile(xs, 99); got != 5 {
		t.Errorf("p99 = %v, want 5", got)
	}
	if xs[0] != 5 {
		t.Error("Percentile sorted its input")
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("no data is not NaN")
	}
	if got := Jain([]float64{1, 1, 1, 1}); got != 1 {
		t.Errorf("Jain of equal shares = %v, want 1", got)
	}
	if got := Jain([]float64{4, 0, 0, 0}); got != 0.25 {
		t.Errorf("Jain of one taking all = %v, want 1/4", got)
	}
	for v, want := range map[float64]string{math.NaN(): "-", math.Inf(1): "inf", 12: "12", 123.4: "123", 1.234: "1.23", 0.1234: "0.123"} {
		if got := Format(v); got != want {
			t.Errorf("Format(%v) = %q, want %q", v, got, want)
		}
	}
}
