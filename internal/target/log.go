package target

import (
	"io"
	"log/slog"
	"time"
)

// timeLayout formats every time in the log: milliseconds, UTC, as seed 001's
// app.py prints them.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// NewLogger returns the logger of one lab process, a server or
// closingtime proxy, writing to w: the event name under "event", the time
// under "time" (milliseconds, UTC), and the pod's name on every line. It
// has no level: every line is an event.
func NewLogger(w io.Writer, format LogFormat, pod string) *slog.Logger {
	opts := &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String(slog.TimeKey, formatTime(a.Value.Time()))
			case slog.MessageKey:
				return slog.Attr{Key: "event", Value: a.Value}
			case slog.LevelKey:
				return slog.Attr{}
			}
			return a
		},
	}
	var h slog.Handler
	if format == LogText {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(h).With("pod", pod)
}

// formatTime formats t as the log does.
func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }
