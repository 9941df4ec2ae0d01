package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// progress shows how far the scenarios of a lab or rollout have come, on
// standard error: a bar per scenario on a terminal, a line per phase
// otherwise, so that a log file or CI output stays readable. A notice (see
// scenario.Progress.Notice) is a line of its own either way, above the
// bars on a terminal.
type progress interface {
	// update reports a scenario's new phase, or a notice. It is safe for
	// concurrent use.
	update(scenario.Progress)
	// finish stops the display; bars of unfinished scenarios stop where they
	// are. It must be called once, before anything else is written to the
	// display's writer except through Write.
	finish()
	// Write writes whole lines above the display, so that a message such as
	// an interrupt's is not drawn over; after finish, it writes them after
	// it. It is safe for concurrent use.
	io.Writer
}

// newProgress returns the progress display for scenarios on w, which shows
// bars when w is a terminal that has a width.
func newProgress(w io.Writer, scenarios []*scenario.Scenario) progress {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if width, _, err := term.GetSize(int(f.Fd())); err == nil && width > 0 {
			return newProgressBars(w, scenarios, false)
		}
	}
	return &progressLines{w: w, start: time.Now()}
}

// progressLines writes a line per phase of each scenario, and one per
// notice after the phase, with the time since the start.
type progressLines struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (l *progressLines) update(p scenario.Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "%6.1fs  %-24s%s\n", time.Since(l.start).Seconds(), p.Scenario, shownPhase(p))
}

// shownPhase formats p's repetition and phase as " 2/3 wait", followed by
// its notice, if any, as " 2/3 wait: pod web-…".
func shownPhase(p scenario.Progress) string {
	s := repetitionOf(p) + " " + string(p.Phase)
	if p.Notice != "" {
		s += ": " + p.Notice
	}
	return s
}

func (l *progressLines) finish() {}

func (l *progressLines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// repetitionOf formats p's repetition as " 2/3", or "" before the first.
func repetitionOf(p scenario.Progress) string {
	if p.Repetition == 0 {
		return ""
	}
	return fmt.Sprintf(" %d/%d", p.Repetition, p.Repetitions)
}

// phaseSteps are the phases of one repetition that advance its bar, in
// order; settle counts as the step before the repetition's warm-up.
var phaseSteps = map[scenario.Phase]int64{
	scenario.PhaseSettle: 0,
	scenario.PhaseWarmUp: 1,
	scenario.PhaseAct:    2,
	scenario.PhaseWait:   3,
	scenario.PhaseAfter:  4,
}

// stepsPerRepetition is the number of phaseSteps a repetition goes
// through.
const stepsPerRepetition = 4

// progressBars draws a bar per scenario: it fills by phase — the deploy,
// then warm-up, act, wait and after of each repetition — and is followed
// by the repetition, the phase and the scenario's elapsed time.
type progressBars struct {
	p    *mpb.Progress
	w    io.Writer
	mu   sync.Mutex
	bars map[string]*scenarioBar
}

type scenarioBar struct {
	bar   *mpb.Bar
	phase string // guarded by progressBars.mu
}

// newProgressBars returns bars for scenarios drawn on w, which must be a
// terminal unless always is true: then they are drawn on any writer.
func newProgressBars(w io.Writer, scenarios []*scenario.Scenario, always bool) *progressBars {
	pb := &progressBars{w: w, bars: map[string]*scenarioBar{}}
	pb.p = mpb.New(mpb.WithOutput(w), mpb.WithWidth(30), mpb.WithRefreshRate(200*time.Millisecond),
		mpb.ContainerOptional(mpb.WithAutoRefresh(), always))
	nameWidth := 0
	for _, s := range scenarios {
		nameWidth = max(nameWidth, len(s.Name))
	}
	for _, s := range scenarios {
		sb := &scenarioBar{phase: "waiting"}
		sb.bar = pb.p.AddBar(0,
			mpb.PrependDecorators(decor.Name(s.Name, decor.WC{W: nameWidth + 1, C: decor.DindentRight})),
			mpb.AppendDecorators(
				decor.Any(func(decor.Statistics) string {
					pb.mu.Lock()
					defer pb.mu.Unlock()
					return sb.phase
				}, decor.WC{W: 18, C: decor.DindentRight | decor.DextraSpace}),
				decor.Elapsed(decor.ET_STYLE_MMSS),
			),
		)
		pb.bars[s.Name] = sb
	}
	return pb
}

func (pb *progressBars) update(p scenario.Progress) {
	if p.Notice != "" {
		fmt.Fprintf(pb, "%s%s\n", p.Scenario, shownPhase(p))
		return
	}
	pb.mu.Lock()
	sb := pb.bars[p.Scenario]
	if sb == nil {
		pb.mu.Unlock()
		return
	}
	sb.phase = string(p.Phase) + repetitionOf(p)
	pb.mu.Unlock()
	total := 1 + int64(p.Repetitions)*stepsPerRepetition
	switch p.Phase {
	case scenario.PhaseDeploy:
		sb.bar.SetTotal(total, false)
	case scenario.PhaseDone:
		sb.bar.SetTotal(total, true)
	default:
		sb.bar.SetCurrent(1 + int64(p.Repetition-1)*stepsPerRepetition + phaseSteps[p.Phase])
	}
}

// Write hands b to the bars' container, which prints it above them at its
// next refresh, or writes it out directly once the bars have finished.
func (pb *progressBars) Write(b []byte) (int, error) {
	if n, err := pb.p.Write(b); err == nil {
		return n, nil
	}
	return pb.w.Write(b)
}

func (pb *progressBars) finish() {
	for _, sb := range pb.bars {
		if !sb.bar.Completed() {
			sb.bar.Abort(false)
		}
	}
	pb.p.Wait()
}
