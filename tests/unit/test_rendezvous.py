"""MASTER_ADDR / MASTER_PORT per launch of a hot-spare job (slurm_ft/job/rendezvous.py)."""
from __future__ import annotations

from hypothesis import given, strategies as st

import socket

from slurm_ft.job.rendezvous import PORT_LO, PORT_SPAN, candidate_ports, launch_env, master_port
from slurm_ft.job.supervisor import port_free_here

ADDRS = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}


def test_master_addr_is_the_node_addr_of_the_steps_first_node():
    env, node = launch_env({}, ("n1", "n2"), ADDRS, 41, 0, 0)
    assert node == "n1" and env["MASTER_ADDR"] == "10.0.0.1"


def test_master_addr_follows_rank_0_when_the_first_node_left_the_step():
    env, node = launch_env({}, ("n2", "n3"), ADDRS, 41, 0, 1)
    assert node == "n2" and env["MASTER_ADDR"] == "10.0.0.2"


def test_a_node_without_a_known_addr_is_reached_by_its_name():
    env, _ = launch_env({}, ("n9", "n1"), ADDRS, 41, 0, 0)
    assert env["MASTER_ADDR"] == "n9"


def test_an_exported_master_addr_never_wins_over_rank_0():
    env, _ = launch_env({"MASTER_ADDR": "login1"}, ("n1", "n2"), ADDRS, 41, 0, 0)
    assert env["MASTER_ADDR"] == "10.0.0.1"


def test_the_users_master_port_is_kept_for_every_launch():
    ports = {launch_env({"MASTER_PORT": "29500"}, ("n1", "n2"), ADDRS, 41, 0, k)[0]["MASTER_PORT"]
             for k in range(3)}
    assert ports == {"29500"}


def test_a_master_port_that_is_no_port_is_replaced():
    for bad in ("", "abc", "0", "70000", "-1"):
        env, _ = launch_env({"MASTER_PORT": bad}, ("n1",), ADDRS, 41, 2, 3)
        assert env["MASTER_PORT"] == str(master_port(41, 2, 3)), bad


def test_the_port_changes_with_each_launch():
    assert [master_port(1234, 0, k) for k in range(3)] == [master_port(1234, 0, 0) + k for k in range(3)]


@given(st.integers(1, 2**32), st.integers(0, 500), st.integers(0, 300))
def test_two_launches_in_a_row_never_share_a_port_and_stay_in_range(job, restart, launch):
    port = master_port(job, restart, launch)
    assert PORT_LO <= port < PORT_LO + PORT_SPAN
    assert port != master_port(job, restart, launch + 1)        # the relaunch after a fault
    assert port != master_port(job, restart + 1, 0)             # the first launch after a requeue


def test_a_port_taken_on_rank_0s_node_is_passed_over_for_the_next_candidate():
    first, second, third = candidate_ports(69, 0, 0)[:3]
    taken = {("n1", first), ("n1", second)}
    env, _ = launch_env({}, ("n1", "n2"), ADDRS, 69, 0, 0, lambda node, port: (node, port) not in taken)
    assert env["MASTER_PORT"] == str(third)


def test_with_every_candidate_taken_the_first_is_kept():
    env, _ = launch_env({}, ("n1",), ADDRS, 69, 0, 0, lambda node, port: False)
    assert env["MASTER_PORT"] == str(master_port(69, 0, 0))


def test_the_users_port_is_kept_even_where_it_is_taken():
    env, _ = launch_env({"MASTER_PORT": "29500"}, ("n1",), ADDRS, 69, 0, 0, lambda node, port: False)
    assert env["MASTER_PORT"] == "29500"


@given(st.integers(1, 2**32), st.integers(0, 500), st.integers(0, 300), st.integers(0, 9), st.integers(0, 9),
       st.booleans())
def test_whichever_candidates_are_taken_two_launches_in_a_row_never_share_a_port(job, restart, launch, k1, k2,
                                                                                after_requeue):
    port = candidate_ports(job, restart, launch)[k1]
    nxt = candidate_ports(job, restart + 1, 0) if after_requeue else candidate_ports(job, restart, launch + 1)
    assert nxt[k2] != port and all(PORT_LO <= p < PORT_LO + PORT_SPAN for p in nxt)


def test_the_supervisor_sees_a_listening_port_on_its_own_node_as_taken():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        free = port_free_here("gpu001")
        assert not free("gpu001", port)
        assert free("gpu002", port)                  # another node's ports cannot be seen from here
    assert free("gpu001", port)


def test_a_node_on_the_batch_hosts_address_shares_its_ports():
    """The lab's nodes (and any nodes that share one host) have one NodeAddr: a port a neighbour's daemon
    listens on (another lab's slurmd, in CI's three rooms) is taken for every one of them; a node on another
    address still cannot be seen from here."""
    addrs = {"gpu001": "localhost", "gpu003": "localhost", "gpu009": "10.0.0.9"}
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        free = port_free_here("gpu001", addrs)
        assert not free("gpu001", port) and not free("gpu003", port)
        assert free("gpu009", port) and free("gpu002", port)
