"""placeholder"""
_watching = False


def watching() -> bool:
    return _watching
