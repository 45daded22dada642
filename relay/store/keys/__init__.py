"""The publisher's key at rest: the process's passphrase (`keyring`), the scrypt PKCS#8 form the
stores write (`pkcs8`), and the PEM checks of what a store takes and reads back (`pem`)."""
