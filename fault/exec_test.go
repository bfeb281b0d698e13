//go:build fault

package fault

import "os/exec"

func execCommand(cmdline ...string) ([]byte, error) {
	return exec.Command(cmdline[0], cmdline[1:]...).CombinedOutput()
}
