package bench

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// thousands formats x rounded to an integer with thousands separators.
func thousands(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	neg := x < 0
	s := fmt.Sprintf("%.0f", math.Abs(x))
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// ms formats d in milliseconds with enough digits for sub-millisecond values.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 100:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.0f ms", v)
	}
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func gib(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// ratio formats a/b as "0.53x", or "-" when b is zero.
func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	r := a / b
	if r >= 10 {
		return fmt.Sprintf("%.0fx", r)
	}
	return fmt.Sprintf("%.2fx", r)
}

func runsString(runs []float64) string {
	parts := make([]string, len(runs))
	for i, r := range runs {
		parts[i] = thousands(r)
	}
	return strings.Join(parts, " / ")
}

// perK returns n per 1,000 messages of a backlog.
func perK(n int64, msgs int) string {
	if msgs == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(n)*1000/float64(msgs))
}
