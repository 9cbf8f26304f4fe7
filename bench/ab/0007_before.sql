-- maxclaw_open_cards_changed as 0006_life_b left it: the thread by id alone

CREATE OR REPLACE FUNCTION maxclaw_open_cards_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta int := 0;
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.status IN ('open', 'with-main', 'handed-back', 'revoked') THEN
        delta := delta + 1;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status IN ('open', 'with-main', 'handed-back', 'revoked') THEN
        delta := delta - 1;
    END IF;
    IF delta <> 0 THEN
        UPDATE threads SET open_cards = greatest(open_cards + delta, 0)
         WHERE id = coalesce(NEW.thread_id, OLD.thread_id);
    END IF;
    RETURN NULL;
END $$;
