package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserSession is one headless Chromium tab driving a console test. Each
// step and read is bounded and fails the test with the console server's
// log; screenshots are kept by name; finish fails the test if the
// browser's console logged anything (the pages have no script, so a
// message there is a page the browser refused: CSP, a resource) and writes
// the screenshots into $OUTBOX_SCREENSHOTS when it is set.
type browserSession struct {
	t         *testing.T
	ctx       context.Context
	serverLog func() string

	mu    sync.Mutex
	logs  []string
	stop  context.CancelFunc
	done  chan struct{}
	shots map[string][]byte
}

// newBrowserSession starts Chromium (failing the test if it is not
// installed: scripts/test installs it) and starts collecting the messages
// of its console.
func newBrowserSession(t *testing.T, serverLog func() string) *browserSession {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (scripts/test installs it: apt-get install chromium): %v", err)
	}
	b := &browserSession{t: t, ctx: browserContext(t, chromium), serverLog: serverLog, done: make(chan struct{}), shots: map[string][]byte{}}
	var consoleCtx context.Context
	consoleCtx, b.stop = context.WithCancel(b.ctx)
	messages := chromedp.Console(consoleCtx)
	go func() {
		defer close(b.done)
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.logs = append(b.logs, m.String()+" ("+m.URL+")")
			b.mu.Unlock()
		}
	}()
	return b
}

// browserStepTimeout bounds each step: an element a page lacks must fail the
// test, not hang it until the test binary's timeout.
const browserStepTimeout = 20 * time.Second

func (b *browserSession) step(what string, action chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, action); err != nil {
		b.t.Fatalf("browser, %s: %v; console log:\n%s", what, err, b.serverLog())
	}
}

func (b *browserSession) read(what string, sel chromedp.CSS) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStepTimeout)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		b.t.Fatalf("browser, read %s: %v; console log:\n%s", what, err, b.serverLog())
	}
	return text
}

// shoot keeps a screenshot of the whole page, or of the element sel when
// one is given, as name.png.
func (b *browserSession) shoot(name string, sel ...chromedp.CSS) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStepTimeout)
	defer cancel()
	var (
		png []byte
		err error
	)
	if len(sel) > 0 {
		png, err = chromedp.Run(ctx, chromedp.Screenshot(sel[0]))
	} else {
		png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	}
	if err != nil {
		b.t.Fatalf("browser, screenshot %s: %v", name, err)
	}
	b.shots[name] = png
}

// finish stops watching the browser's console, fails the test if it logged
// anything, and writes the screenshots when asked to.
func (b *browserSession) finish() {
	b.t.Helper()
	b.stop()
	<-b.done
	if len(b.logs) > 0 {
		b.t.Fatalf("the browser's console logged, for pages with no script:\n%s", strings.Join(b.logs, "\n"))
	}
	if dir := os.Getenv(envScreenshots); dir != "" {
		for name, png := range b.shots {
			if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
				b.t.Fatal(err)
			}
		}
	}
}
