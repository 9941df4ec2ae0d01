package graceful

// QuietGrace is the quiet rule's second, for the external tests.
const QuietGrace = quietGrace
