"""The store's rules in plain Python, on plain records: the memory and JSON backends' one form.

The SQL backends state the same rules as statements (`relay.store.sql`); the contract suite and
the state machine hold both forms to the same answers. Each function takes the aggregate's state
as a plain value (dicts of frozen records), changes it in place where it writes, and never does
I/O: the backend around it supplies atomicity (a lock, or a locked file update).
"""
