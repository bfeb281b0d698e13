package outboxaws

// BatchBytesMax is the most bytes, the sizes of its messages added up, this
// package puts in one SendMessageBatch or PublishBatch request: the
// request's limit on SNS and on SQS queues of the default size (a larger
// message, which a queue may take, goes alone).
const BatchBytesMax = 256 << 10

// chunks splits entries of the given sizes, in order, into runs of at most
// BatchMax entries and BatchBytesMax bytes (a larger entry alone): AWS
// refuses a whole request over either, which no retry would change. Each run
// is [start, end) of sizes.
func chunks(sizes []int) [][2]int {
	var out [][2]int
	start, bytes := 0, 0
	for i, n := range sizes {
		if i > start && (i-start == BatchMax || bytes+n > BatchBytesMax) {
			out = append(out, [2]int{start, i})
			start, bytes = i, 0
		}
		bytes += n
	}
	if start < len(sizes) {
		out = append(out, [2]int{start, len(sizes)})
	}
	return out
}
