"""The password hasher of the test process."""
from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's PBKDF2 at 1,000 rounds instead of its 1,000,000 (0.3 s a hash on CI's machine,
    paid for every user a test makes and every password login). No test is about the hash's
    strength. The encoded hash names its rounds, so a server process of a test, on the stock
    hasher, checks it as usual (and stores it again at full strength at the first login)."""

    iterations = 1_000
