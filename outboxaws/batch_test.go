package outboxaws

import (
	"slices"
	"testing"
)

// A request never holds more than BatchMax entries nor more than
// BatchBytesMax bytes, unless one entry alone is larger.
func TestChunksKeepEachRequestWithinTheCountAndSizeLimits(t *testing.T) {
	t.Parallel()
	const k = 1 << 10
	cases := []struct {
		sizes []int
		want  [][2]int
	}{
		{nil, nil},
		{[]int{1, 1, 1}, [][2]int{{0, 3}}},
		{slices.Repeat([]int{1}, 25), [][2]int{{0, 10}, {10, 20}, {20, 25}}},
		{[]int{100 * k, 100 * k, 100 * k, 1}, [][2]int{{0, 2}, {2, 4}}},
		{[]int{1, 300 * k, 1}, [][2]int{{0, 1}, {1, 2}, {2, 3}}},
		{[]int{128 * k, 128 * k, 1}, [][2]int{{0, 2}, {2, 3}}},
	}
	for _, c := range cases {
		if got := chunks(c.sizes); !slices.Equal(got, c.want) {
			t.Errorf("chunks(%v) = %v, want %v", c.sizes, got, c.want)
		}
	}
}
