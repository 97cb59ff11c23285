"""The target's and the candidate's source: git plumbing, overlays, candidate identity, sdists and pinned
packages, frozen manifests, worktree checks and numeric-setting scans. Imports no stage.
"""
