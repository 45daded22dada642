"""`talaria-relay` sealing keys at the scrypt cost the rekey crash test names.

The crash test's short run (in the suite) seals at a cheap cost, its `-m kills` soak at the real
one: this is the command's own `main` with that one constant set, so a forked child runs it as it
would run `python -m relay`.
"""

import os

from relay.cli import main
from relay.store.keys import pkcs8

SCRYPT_LOG_N_ENV = "TALARIA_RELAY_TEST_SCRYPT_LOG_N"

if __name__ == "__main__":
    pkcs8.SCRYPT_LOG_N = int(os.environ[SCRYPT_LOG_N_ENV])
    raise SystemExit(main())
