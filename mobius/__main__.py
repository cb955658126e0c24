import sys

try:  # Ctrl-C at any moment, even while the CLI's modules import: one line
    from mobius.cli import main

    code = main()
except KeyboardInterrupt:
    print("mobius: interrupted; nothing was written", file=sys.stderr)
    code = 130
try:
    import signal

    # The outcome is decided and reported: a Ctrl-C during interpreter shutdown
    # (when Python has restored the default handler) must not kill us with -SIGINT.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
except KeyboardInterrupt:
    pass
sys.exit(code)
