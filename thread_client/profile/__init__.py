"""The profile: one API's request shape, nonce, signing, answers and penalties, read from TOML and compiled."""

from .json_path import JsonPath
from .model import AnswerRule, NonceShape, Penalty, Profile, RequestShape, Settle, Signing
from .reader import DEFAULT_PROFILE, ProfileError, builtin_names, load_profile, read_profile
from .signing import Secret, SignedParts, Signer
from .writer import profile_toml

__all__ = [
    "DEFAULT_PROFILE", "AnswerRule", "JsonPath", "NonceShape", "Penalty", "Profile", "ProfileError", "RequestShape", "Secret",
    "Settle", "SignedParts", "Signer", "Signing", "builtin_names", "load_profile", "profile_toml", "read_profile",
]
