"""Principals: parsing, Unix peer credentials against the real user database,
and certificate subjects."""

import grp
import os
import pwd

import pytest

from hostbroker.security import principals
from hostbroker.security.principals import (ANONYMOUS, UNIX_HOST, Principal, common_name,
                                            from_address, from_certificate,
                                            from_peer_credentials)


def test_a_principal_is_type_colon_name():
    p = Principal.parse("User:alice")
    assert (p.type, p.name, str(p)) == ("User", "alice", "User:alice")
    assert Principal.parse("User:CN=x,O=y:z").name == "CN=x,O=y:z"  # the first colon splits


@pytest.mark.parametrize("text", ["alice", ":alice", "User:", "Us er:a", "User:a\nb",
                                  "User:" + "x" * 256, "Us3r:a", "User:\ud800"])
def test_a_bad_principal_is_refused_in_one_line(text):
    with pytest.raises(ValueError) as e:
        Principal.parse(text)
    assert "\n" not in str(e.value)


def test_peer_credentials_of_root_and_of_this_process():
    root = from_peer_credentials(0, 0)
    assert root.principal == Principal("User", "root") and root.host == UNIX_HOST
    assert Principal("Group", "root") in root.groups
    me = from_peer_credentials(os.getuid(), os.getgid())
    name = pwd.getpwuid(os.getuid()).pw_name
    assert me.principal == Principal("User", name)
    wanted = {Principal("Group", grp.getgrgid(g).gr_name)
              for g in os.getgrouplist(name, os.getgid())}
    assert set(me.groups) == wanted
    assert me.principals()[0] == me.principal


def test_an_unknown_uid_and_gid_are_named_by_number():
    uid = gid = 3_999_999_917
    identity = from_peer_credentials(uid, gid)
    assert identity.principal == Principal("User", f"uid={uid}")
    assert identity.groups == (Principal("Group", f"gid={gid}"),)


def test_a_certificate_subject_gives_its_common_name():
    cert = {"subject": ((("countryName", "SE"),), (("organizationName", "x"),),
                        (("commonName", "alice"),))}
    assert common_name(cert) == "alice"
    identity = from_certificate(cert, "127.0.0.1")
    assert identity.principal == Principal("User", "alice") and identity.host == "127.0.0.1"
    assert from_certificate(None, "::1").principal == ANONYMOUS
    with pytest.raises(ValueError, match="no common name"):
        from_certificate({"subject": ((("organizationName", "x"),),)}, "::1")
    with pytest.raises(ValueError):
        from_certificate({"subject": ((("commonName", "a\x00b"),),)}, "::1")


def test_plain_tcp_is_anonymous():
    assert from_address("10.1.2.3").principal == ANONYMOUS


def test_names_are_remembered_for_a_bounded_time(monkeypatch):
    """A uid given a name after it was first seen is named within
    LOOKUP_SECONDS (the clock faked; the user database real)."""
    uid = 3_999_999_923
    now = [1000.0]
    monkeypatch.setattr(principals.time, "monotonic", lambda: now[0])
    names = {uid: None}
    remembered = principals._Remembered(lambda u: names[u])
    assert remembered(uid) is None
    names[uid] = "late"
    now[0] += principals.LOOKUP_SECONDS / 2
    assert remembered(uid) is None  # still remembered
    now[0] += principals.LOOKUP_SECONDS
    assert remembered(uid) == "late"
    # the real lookups are such remembered ones
    assert isinstance(principals.user_name, principals._Remembered)
    assert isinstance(principals.group_name, principals._Remembered)


def test_the_kernels_groups_are_taken_when_given():
    # root's groups as the kernel gave them, not as the user database lists them
    other = grp.getgrgid(1).gr_name
    assert "root" not in grp.getgrgid(1).gr_mem
    assert set(from_peer_credentials(0, 0, (1,)).groups) == \
        {Principal("Group", "root"), Principal("Group", other)}
    assert from_peer_credentials(0, 0, ()).groups == (Principal("Group", "root"),)
