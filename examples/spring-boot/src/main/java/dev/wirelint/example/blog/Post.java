package dev.wirelint.example.blog;

import org.springframework.data.annotation.Id;
import org.springframework.data.mongodb.core.mapping.Document;
import org.springframework.data.mongodb.core.mapping.Field;

/** A post as stored: its author by id, in the field "author". */
@Document("posts")
public class Post {
  @Id private String id;
  private String title;
  private String body;

  @Field("author")
  private String authorId;

  protected Post() {}

  public Post(String authorId, String title, String body) {
    this.authorId = authorId;
    this.title = title;
    this.body = body;
  }

  public String getId() {
    return id;
  }

  public String getTitle() {
    return title;
  }

  public void setTitle(String title) {
    this.title = title;
  }

  public String getBody() {
    return body;
  }

  public String getAuthorId() {
    return authorId;
  }
}
