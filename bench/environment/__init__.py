"""What a number was made with: the numerics fingerprint of a process and the lock of the library versions."""
