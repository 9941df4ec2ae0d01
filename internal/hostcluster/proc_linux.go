package hostcluster

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Process is a process of this machine that has not exited, as
// /proc/PID/stat shows it.
type Process struct {
	// PID is its process ID.
	PID int
	// Session is the ID of its session. Every process of a cluster is in
	// its daemon's session, whose ID is the daemon's PID (State.PID).
	Session int
}

// Processes returns the processes of this machine that have not exited,
// by PID. Zombies, which have exited and wait for their parent to reap
// them, are left out, and so is a process that exits while it reads
// /proc. It is how Down finds what is left of a cluster.
func Processes() []Process {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var procs []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fields, err := statFields(pid)
		if err != nil || fields[0] == "Z" {
			continue
		}
		if sid, err := strconv.Atoi(fields[3]); err == nil {
			procs = append(procs, Process{PID: pid, Session: sid})
		}
	}
	return procs
}

// procStat returns the start time of process pid, in clock ticks after
// boot, and whether it has exited (a zombie), from /proc/PID/stat.
func procStat(pid int) (start uint64, zombie bool, err error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, false, err
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return start, fields[0] == "Z", nil
}

// statFields returns the fields of /proc/PID/stat after the command's
// name: the process's state (field 3 of proc(5)) first, its session
// (field 6) fourth, its start time (field 22) twentieth.
func statFields(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	// The name, in parentheses, may itself hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	return fields, nil
}
