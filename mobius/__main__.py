import signal
import sys

try:  # Ctrl-C while the CLI's own modules are still importing: one line, too
    from mobius.cli import main
except KeyboardInterrupt:
    print("mobius: interrupted; nothing was written", file=sys.stderr)
    sys.exit(130)

code = main()
# The outcome is decided and reported: a Ctrl-C during interpreter shutdown (when
# Python has already restored the default handler) must not kill us with -SIGINT.
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.exit(code)
