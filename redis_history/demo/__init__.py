"""The demo behind ``redis-history demo`` and the throwaway ``redis-server`` it can start.

Nothing a pod or a worker imports reaches this package.
"""
