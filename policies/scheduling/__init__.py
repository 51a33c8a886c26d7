"""Scheduling policies: fcfs, sjf, lpm, priority, vtc, makespan."""

from twinserve.policies.scheduling.base import SchedulingPolicy
from twinserve.policies.scheduling.fcfs import FCFS
from twinserve.policies.scheduling.lpm import LongestPrefixMatch
from twinserve.policies.scheduling.makespan import Makespan
from twinserve.policies.scheduling.priority import PriorityWithAging
from twinserve.policies.scheduling.sjf import ShortestPromptFirst
from twinserve.policies.scheduling.vtc import VirtualTokenCounter

__all__ = ["FCFS", "LongestPrefixMatch", "Makespan", "PriorityWithAging", "SchedulingPolicy",
           "ShortestPromptFirst", "VirtualTokenCounter"]
