/**
 * Stateful Responses API on the Edge's response store (`store/response_store.ts`): a finished
 * response is stored unless the request said `store: false`; `previous_response_id` continues
 * the conversation of a stored response (its chain's inputs and outputs go before the new input;
 * earlier `instructions` are not carried, as in OpenAI); `GET /v1/responses/{id}`,
 * `GET /v1/responses/{id}/input_items` and `DELETE /v1/responses/{id}` read and delete them.
 *
 * Every lookup is scoped by the caller's tenant: another tenant's response, one never stored,
 * an expired or a deleted one are all the same 404, so an id tells a tenant nothing.
 *
 * A conversation goes to its Node as one run, in one frame of the node wire, so its history is
 * bounded by `wire.max_frame_bytes`: a longer one is refused 400 naming `previous_response_id`
 * as soon as the chain walked so far is over it (not after reading all of it).
 * @module
 */
import type { Context } from "hono";
import type { Logger } from "../../../../shared/log.ts";
import type { ChatMessage } from "../../../../shared/run.ts";
import { utf8Length } from "../../../../shared/utf8.ts";
import type { ResponseStore, StoredResponse } from "../../ports.ts";
import { callerOf } from "../auth.ts";
import { checkDeclared } from "../capabilities.ts";
import { FieldError, JsonFields } from "../json_fields.ts";
import type { ResolvedModel } from "../model_resolver.ts";
import type { ParseOptions } from "./chat.ts";
import {
  itemMessages,
  type KeepResponse,
  parseInputItem,
  type ResponsesRequest,
} from "./responses.ts";

/** Responses a conversation may chain at most (each hop is one read of the store). */
export const MAX_CONVERSATION = 1000;

/** OpenAI's 404 for a response id the caller cannot see. */
function responseNotFound(
  c: Context,
  message: string,
  param: string | null,
  code: string | null,
): Response {
  return c.json({ error: { message, type: "invalid_request_error", param, code } }, 404);
}

function notFound(c: Context, id: string): Response {
  return responseNotFound(c, `Response with id '${id}' not found.`, null, null);
}

/** How a conversation is continued: its bounds and how its stored items are read again. */
export interface ConversationOptions {
  /** The most bytes of history a conversation may carry (the node wire's frame limit). */
  maxHistoryBytes: number;
  /** How the stored input items are parsed again (image links allowed or not, as now). */
  parse: ParseOptions;
}

/** About what `messages` weigh in a run request: their texts, image URLs and tool calls. */
function historyBytes(messages: readonly ChatMessage[]): number {
  let n = 0;
  for (const m of messages) {
    n += utf8Length(m.content) + utf8Length(m.toolCallId ?? "");
    for (const p of m.parts ?? []) n += utf8Length(p.type === "text" ? p.text : p.url);
    for (const c of m.toolCalls ?? []) n += utf8Length(c.id + c.name + c.arguments);
  }
  return n;
}

/**
 * The run messages of the stored chain ending at `id`, oldest first; or the id of the first
 * link missing. Throws (400, `previous_response_id`) once the chain is longer than
 * {@linkcode MAX_CONVERSATION} responses or its messages more than `maxHistoryBytes`.
 */
function historyOf(
  store: ResponseStore | undefined,
  id: string,
  owner: string,
  options: ConversationOptions,
): ChatMessage[][] | { missing: string } {
  const turns: ChatMessage[][] = [];
  let bytes = 0;
  for (let next: string | null = id; next !== null;) {
    if (turns.length === MAX_CONVERSATION) {
      throw new FieldError(
        "previous_response_id",
        `'previous_response_id' continues a conversation of more than ${MAX_CONVERSATION} ` +
          "responses; start a new one with the history you need as input",
      );
    }
    const stored: StoredResponse | undefined = store?.get(next, owner);
    if (!stored) return { missing: next };
    const messages = messagesOf(stored, options.parse);
    bytes += historyBytes(messages);
    if (bytes > options.maxHistoryBytes) {
      throw new FieldError(
        "previous_response_id",
        `'previous_response_id' continues a conversation whose history is over ` +
          `${options.maxHistoryBytes} bytes, more than one run can carry to a node ` +
          "(wire.max_frame_bytes); start a new one with the history you need as input",
      );
    }
    turns.push(messages);
    next = stored.previousResponseId;
  }
  return turns.reverse();
}

/** The run messages of a stored response: its input items, then its output items. */
function messagesOf(stored: StoredResponse, parse: ParseOptions): ChatMessage[] {
  const output = Array.isArray(stored.response.output) ? stored.response.output : [];
  return itemMessages(
    [...stored.input, ...output].map((item) =>
      parseInputItem(new JsonFields(item, "previous_response_id"), parse)
    ),
  );
}

/**
 * With `previous_response_id`, puts the conversation so far between the request's instructions
 * and its input (refusing its images when `model` does not declare `vision`). Answers the 404 to
 * send when the previous response (or an earlier one of its chain) is not the caller's to
 * continue; undefined when the request may run.
 */
export function continueConversation(
  c: Context,
  req: ResponsesRequest,
  model: ResolvedModel,
  store: ResponseStore | undefined,
  options: ConversationOptions,
): Response | undefined {
  const previous = req.previousResponseId;
  if (previous === null) return undefined;
  const chain = historyOf(store, previous, callerOf(c).name, options);
  if (!Array.isArray(chain)) {
    const earlier = chain.missing === previous
      ? ""
      : ` (an earlier response of the conversation of '${previous}')`;
    return responseNotFound(
      c,
      `Previous response with id '${chain.missing}' not found${earlier}.`,
      "previous_response_id",
      "previous_response_not_found",
    );
  }
  const history = chain.flat();
  // The conversation's images count as this request's: the model must still take them.
  checkDeclared(model, { messages: history }, { image: () => "previous_response_id" });
  req.input.messages.splice(req.instructionMessages, 0, ...history);
  req.historyMessages = history.length;
  return undefined;
}

/**
 * Stores each finished response of `req` for the caller when it asked (`store`, the default);
 * one that is not stored (too large, no store, a failing disk) is answered with `store: false`.
 */
export function responseKeeper(
  c: Context,
  req: ResponsesRequest,
  store: ResponseStore | undefined,
  logger?: Logger,
): KeepResponse {
  if (!req.store) return (response) => response;
  const owner = callerOf(c).name;
  return (response) => {
    const id = String(response.id);
    let kept = false;
    try {
      kept = store?.put({
        id,
        owner,
        model: req.model,
        createdAtMs: Number(response.created_at) * 1000,
        status: String(response.status),
        previousResponseId: req.previousResponseId,
        input: req.inputItems,
        response,
      }) ?? false;
      if (store && !kept) {
        logger?.warn("response not stored: larger than responses.max_response_bytes", {
          response_id: id,
          tenant: owner,
        });
      }
    } catch (err) {
      logger?.error("cannot store response", { err, response_id: id, tenant: owner });
    }
    return kept ? response : { ...response, store: false };
  };
}

/** Query parameters a stored-response route reads; any other is refused 400 by name. */
function readQuery(c: Context, known: readonly string[]): URLSearchParams {
  const query = new URL(c.req.url).searchParams;
  for (const key of query.keys()) {
    if (!known.includes(key)) throw new FieldError(key, `'${key}' is not a supported parameter`);
  }
  return query;
}

/** `include` values honoured: image URLs are always listed in full. */
const INCLUDES = ["message.input_image.image_url"];

function checkInclude(query: URLSearchParams): void {
  for (const value of [...query.getAll("include"), ...query.getAll("include[]")]) {
    if (!INCLUDES.includes(value)) {
      throw new FieldError("include", `'include' value '${value}' is not supported`);
    }
  }
}

/** `GET /v1/responses/{id}`: the stored response object, as its create answered it. */
export function retrieveResponse(c: Context, store: ResponseStore | undefined): Response {
  const query = readQuery(c, ["include", "include[]", "stream"]);
  checkInclude(query);
  const stream = query.get("stream");
  if (stream !== null && stream !== "false") {
    throw new FieldError(
      "stream",
      "'stream': replaying a stored response as events is not supported",
    );
  }
  const id = c.req.param("id") ?? "";
  const stored = store?.get(id, callerOf(c).name);
  return stored ? c.json(stored.response) : notFound(c, id);
}

/** `GET /v1/responses/{id}/input_items`: a page of the response's own input items. */
export function listInputItems(c: Context, store: ResponseStore | undefined): Response {
  const query = readQuery(c, ["limit", "order", "after", "include", "include[]"]);
  checkInclude(query);
  const limitText = query.get("limit") ?? "20";
  const limit = Number(limitText);
  if (!/^\d+$/.test(limitText) || limit < 1 || limit > 100) {
    throw new FieldError("limit", `'limit' must be an integer from 1 to 100: got '${limitText}'`);
  }
  const order = query.get("order") ?? "desc";
  if (order !== "asc" && order !== "desc") {
    throw new FieldError("order", `'order' must be one of asc, desc: got '${order}'`);
  }
  const id = c.req.param("id") ?? "";
  const stored = store?.get(id, callerOf(c).name);
  if (!stored) return notFound(c, id);
  const items = order === "asc" ? stored.input : [...stored.input].reverse();
  const after = query.get("after");
  let start = 0;
  if (after !== null) {
    const at = items.findIndex((item) => item.id === after);
    if (at < 0) {
      throw new FieldError(
        "after",
        `'after' must be the id of an input item of '${id}': got '${after}'`,
      );
    }
    start = at + 1;
  }
  const data = items.slice(start, start + limit);
  return c.json({
    object: "list",
    data,
    first_id: data[0]?.id ?? null,
    last_id: data.at(-1)?.id ?? null,
    has_more: start + limit < items.length,
  });
}

/** `DELETE /v1/responses/{id}`: deletes the caller's stored response. */
export function deleteResponse(c: Context, store: ResponseStore | undefined): Response {
  readQuery(c, []);
  const id = c.req.param("id") ?? "";
  if (!store?.delete(id, callerOf(c).name)) return notFound(c, id);
  return c.json({ id, object: "response", deleted: true });
}
