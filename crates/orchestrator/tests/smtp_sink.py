"""A local SMTP server for the notification tests: aiosmtpd, keeping each message it is given as
one file in a directory (written whole, then renamed into place, so a reader never sees half).

    python3 smtp_sink.py OUT_DIR PORT

Prints "ready" once it accepts connections, and runs until it is killed.
"""

import os
import sys
import threading
import uuid

from aiosmtpd.controller import Controller


class Keep:
    def __init__(self, out):
        self.out = out

    async def handle_DATA(self, server, session, envelope):
        name = os.path.join(self.out, uuid.uuid4().hex)
        with open(name + ".tmp", "wb") as f:
            f.write(envelope.original_content or envelope.content)
        os.rename(name + ".tmp", name + ".eml")
        return "250 Message accepted for delivery"


def main():
    out, port = sys.argv[1], int(sys.argv[2])
    controller = Controller(Keep(out), hostname="127.0.0.1", port=port)
    controller.start()
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
