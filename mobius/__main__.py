import sys

try:  # Ctrl-C while the CLI's own modules are still importing: one line, too
    from mobius.cli import main
except KeyboardInterrupt:
    print("mobius: interrupted; nothing was written", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
