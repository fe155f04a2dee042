"""Adapters that let agent frameworks keep their history in redis-history.

Each module imports its framework only when imported itself, and the package
(``import redis_history``) never imports this one:

- :mod:`redis_history.integrations.openai_agents`: ``RedisHistorySession``, a
  ``Session`` of the OpenAI Agents SDK (extra ``openai-agents``).
- :mod:`redis_history.integrations.langchain`: ``RedisHistoryChatMessageHistory``, a
  LangChain ``BaseChatMessageHistory`` (extra ``langchain``).
"""
